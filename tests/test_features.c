/*
 * test_features.c - the descriptor's features against the reference, alone and combined:
 * boolean and additive masks (every dtype and broadcast), q_lens / kv_lens padding,
 * packed varlen, sliding windows, softcap, ALiBi, sinks, top-left causal and 16-bit
 * storage; plus the properties the comparison alone does not show: fully masked rows
 * give zeros and lse = -inf, a hidden key's non-finite V never reaches the output, and
 * blocks outside a window or an all-hiding mask are skipped, not computed.
 *
 * 16-bit tolerance: both paths read the same rounded inputs, so only the output's own
 * rounding is added to the fp32 tolerance (harness.h, th_compare).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/philox.h"
#include "harness.h"
#include "suites.h"

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

static uint64_t seed_of(int a, int b, int c) { return (uint64_t)(a * 7919 + b * 131 + c) + 17; }

static void masks(void) {
    static const int bcasts[] = {0, SC_BCAST_B, SC_BCAST_H, SC_BCAST_B | SC_BCAST_H,
                                 SC_BCAST_ROWS | SC_BCAST_H, SC_BCAST_B | SC_BCAST_H | SC_BCAST_ROWS};
    static const float hidden[] = {0.0f, 0.3f, 0.9f};
    for (int kind = SDPA_MASK_ADDITIVE; kind <= SDPA_MASK_BOOL; kind++)
        for (int bc = 0; bc < N(bcasts); bc++)
            for (int hd = 0; hd < N(hidden); hd++) {
                sc_case c = {.B = 2, .Hq = 4, .Hkv = 2, .Tq = 70, .Tkv = 133, .Dk = 24, .Dv = 40,
                             .causal = bc % 3, .mask = kind, .mask_bcast = bcasts[bc],
                             .mask_hidden = hidden[hd], .mask_dt = (sdpa_dtype)(bc % 3),
                             .seed = seed_of(kind, bc, hd)};
                th_run_case(&c, kind == SDPA_MASK_BOOL ? "bool mask" : "additive mask");
            }
}

static void lengths(void) {
    static const int modes[] = {SC_LENS_PADDED, SC_LENS_KV, SC_LENS_VARLEN};
    static const int64_t shapes[][2] = {{1, 1}, {7, 129}, {65, 64}, {130, 257}, {300, 100}};
    for (int md = 0; md < N(modes); md++)
        for (int s = 0; s < N(shapes); s++)
            for (int causal = 0; causal < 3; causal++) {
                sc_case c = {.B = 5, .Hq = 4, .Hkv = 1, .Tq = shapes[s][0], .Tkv = shapes[s][1],
                             .Dk = 32, .Dv = 16, .causal = causal, .lens = modes[md],
                             .layout = s % 3, .seed = seed_of(md, s, causal)};
                if (md == 2 && s % 3 == 1)
                    c.layout = SC_BHTD; /* varlen views ignore stride_b: any layout works */
                th_run_case(&c, "lengths");
            }
}

static void windows(void) {
    static const int64_t wins[][2] = {{0, 0}, {3, 0}, {16, 5}, {0, 40}, {64, 64},
                                      {1000, 1000}, {200, 0}, {1, 100000}};
    static const int64_t shapes[][2] = {{129, 129}, {40, 300}, {300, 40}, {1, 500}};
    for (int w = 0; w < N(wins); w++)
        for (int s = 0; s < N(shapes); s++)
            for (int causal = 0; causal < 3; causal++) {
                sc_case c = {.B = 1, .Hq = 2, .Hkv = 2, .Tq = shapes[s][0], .Tkv = shapes[s][1],
                             .Dk = 16, .Dv = 16, .causal = causal, .window = 1, .wl = wins[w][0],
                             .wr = wins[w][1], .seed = seed_of(w, s, causal)};
                th_run_case(&c, "window");
            }
}

/* Scores near +-100 where a missing max subtraction or an unbounded tanh shows. */
static void fill_big(sc_tensors *t, const sc_case *c, void *ctx) {
    (void)ctx;
    for (int64_t b = 0; b < t->VB; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < t->desc.len_q; i++)
                for (int64_t d = 0; d < c->Dk; d++)
                    sc_at(&t->q, b, h, i)[d] = (d % 2 ? 4.0f : -3.0f) * (float)((i % 5) + 1);
}

static void modifiers(void) {
    static const float caps[] = {0.5f, 5.0f, 30.0f, 1e4f};
    for (int i = 0; i < N(caps); i++)
        for (int causal = 0; causal < 2; causal++) {
            sc_case c = {.B = 2, .Hq = 2, .Hkv = 1, .Tq = 77, .Tkv = 140, .Dk = 48, .Dv = 32,
                         .causal = causal, .softcap = caps[i], .scale = 0.5f,
                         .seed = seed_of(i, causal, 1)};
            th_run_case(&c, "softcap");
            th_run_case_with(&c, "softcap, logits ~100", fill_big, NULL, NULL);
        }
    for (int causal = 0; causal < 3; causal++) {
        sc_case c = {.B = 2, .Hq = 8, .Hkv = 2, .Tq = 90, .Tkv = 150, .Dk = 32, .Dv = 32,
                     .causal = causal, .alibi = 1, .seed = seed_of(causal, 2, 2)};
        th_run_case(&c, "ALiBi");
        c.alibi = 0;
        c.sinks = 1;
        th_run_case(&c, "sinks");
        c.Tq = 1; /* decode with sinks: one row of the split-KV merge */
        c.Tkv = 3000;
        th_run_case(&c, "sinks, decode");
    }
}

static void top_left(void) {
    static const int64_t shapes[][2] = {{100, 40}, {40, 100}, {1, 64}, {64, 1}, {129, 129}};
    for (int s = 0; s < N(shapes); s++) {
        sc_case c = {.B = 1, .Hq = 2, .Hkv = 1, .Tq = shapes[s][0], .Tkv = shapes[s][1],
                     .Dk = 20, .Dv = 20, .causal = SDPA_CAUSAL_TOP_LEFT, .seed = seed_of(s, 3, 3)};
        th_run_case(&c, "top-left causal");
    }
}

static void dtypes(void) {
    static const sdpa_dtype combos[][4] = {
        {SDPA_F16, SDPA_F32, SDPA_F32, SDPA_F32},   {SDPA_F32, SDPA_F16, SDPA_F32, SDPA_F32},
        {SDPA_F32, SDPA_F32, SDPA_BF16, SDPA_F32},  {SDPA_F32, SDPA_F32, SDPA_F32, SDPA_F16},
        {SDPA_F16, SDPA_F16, SDPA_F16, SDPA_F16},   {SDPA_BF16, SDPA_BF16, SDPA_BF16, SDPA_BF16},
        {SDPA_F32, SDPA_F16, SDPA_F16, SDPA_F32},   {SDPA_BF16, SDPA_F16, SDPA_BF16, SDPA_F32}};
    static const int64_t shapes[][4] = {{65, 65, 64, 64}, {1, 700, 128, 128}, {113, 37, 17, 80}};
    for (int i = 0; i < N(combos); i++)
        for (int s = 0; s < N(shapes); s++) {
            sc_case c = {.B = 2, .Hq = 4, .Hkv = 2, .Tq = shapes[s][0], .Tkv = shapes[s][1],
                         .Dk = shapes[s][2], .Dv = shapes[s][3], .causal = (i + s) & 1,
                         .layout = s == 2 ? SC_PADDED : SC_BHTD, .seed = seed_of(i, s, 4)};
            memcpy(c.dt, combos[i], sizeof c.dt);
            th_run_case(&c, "16-bit storage");
        }
}

/* Dropout: the fused path drops exactly the weights the reference drops (a different
 * set would be off by O(weight)), at every rate, through split-KV and packed varlen; and
 * the rate is the one asked for. */
static void dropout(void) {
    static const float ps[] = {0.1f, 0.5f, 0.9f};
    for (int i = 0; i < N(ps); i++)
        for (int causal = 0; causal < 2; causal++) {
            sc_case c = {.B = 2, .Hq = 4, .Hkv = 2, .Tq = 70, .Tkv = 150, .Dk = 16, .Dv = 24,
                         .causal = causal, .dropout = ps[i], .seed = seed_of(i, causal, 5)};
            th_run_case(&c, "dropout");
            c.Tq = 1;
            c.Tkv = 3000;
            th_run_case(&c, "dropout, split-KV decode");
            c.Tq = 40;
            c.Tkv = 90;
            c.lens = SC_LENS_VARLEN;
            c.B = 4;
            th_run_case(&c, "dropout, packed varlen");
        }
    /* the kept fraction over 2^20 weights is within 5 standard deviations of 1 - p */
    const double p = 0.3;
    int64_t kept = 0, total = 0;
    for (int64_t i = 0; i < 1024; i++)
        for (int64_t j4 = 0; j4 < 256; j4++) {
            uint32_t w[4];
            sdpa_dropout_words(12345, 1, 2, i, j4, w);
            for (int k = 0; k < 4; k++)
                kept += w[k] >= (uint32_t)(p * 4294967296.0);
            total += 4;
        }
    const double frac = (double)kept / (double)total, sd = sqrt(p * (1 - p) / (double)total);
    CHECK(fabs(frac - (1 - p)) < 5 * sd, "dropout 0.3 kept %.4f of the weights", frac);
}

/* Random combinations of every feature (a property test with a fixed seed). */
static void combinations(int count) {
    uint64_t rng = 0xc0ffee + (uint64_t)th_isa;
#define PICK(n) ((int)(sc_rand_u64(&rng) % (uint64_t)(n)))
    for (int k = 0; k < count; k++) {
        static const int64_t Ts[] = {1, 2, 7, 16, 17, 63, 64, 65, 113, 200};
        static const int64_t Ds[] = {1, 3, 8, 16, 17, 64, 80};
        static const int64_t hk[][2] = {{1, 1}, {2, 1}, {4, 2}, {8, 1}, {3, 3}};
        sc_case c = {.B = 1 + PICK(3), .Hq = hk[k % 5][0], .Hkv = hk[k % 5][1],
                     .Tq = Ts[PICK(N(Ts))], .Tkv = Ts[PICK(N(Ts))], .Dk = Ds[PICK(N(Ds))],
                     .Dv = Ds[PICK(N(Ds))], .causal = PICK(3), .layout = PICK(3),
                     .seed = 1000 + (uint64_t)k};
        if (PICK(2)) {
            c.window = 1;
            c.wl = PICK(3) == 0 ? 0 : PICK(80);
            c.wr = PICK(3) == 0 ? 0 : PICK(80);
        }
        if (PICK(3) == 0)
            c.softcap = 1.0f + (float)PICK(20);
        c.alibi = PICK(3) == 0;
        c.sinks = PICK(3) == 0;
        if (PICK(2)) {
            c.mask = 1 + PICK(2);
            c.mask_dt = (sdpa_dtype)PICK(3);
            c.mask_bcast = PICK(8);
            c.mask_hidden = (float)PICK(10) / 10.0f;
        }
        c.lens = PICK(4);
        if (PICK(4) == 0)
            c.dropout = (float)(1 + PICK(8)) / 10.0f;
        for (int i = 0; i < 4; i++)
            c.dt[i] = PICK(3) == 0 ? (sdpa_dtype)(1 + PICK(2)) : SDPA_F32;
        c.threads = PICK(4);
        th_run_case(&c, "combination");
    }
#undef PICK
}

/* Rows that see nothing under every feature give +0 and lse = -inf (or the sink). */
static int row_is_zero(const sc_tensors *t, const sc_case *c, int64_t b, int64_t h, int64_t i) {
    int ok = 1;
    for (int64_t d = 0; d < c->Dv; d++) {
        const float x = sc_get(&t->o, b, h, i, d);
        ok &= x == 0.0f && !signbit(x);
    }
    return ok;
}

static int row_is_empty(const sc_tensors *t, const sc_case *c, int64_t b, int64_t h, int64_t i) {
    const float l = t->lse[b * c->Hq * t->desc.len_q + h * t->desc.len_q + i];
    return row_is_zero(t, c, b, h, i) && (c->sinks ? l == t->sinks[h] : (isinf(l) && l < 0));
}

static void fully_masked_rows(void) {
    /* a padding row: q_lens[1] = 2 of 9 rows */
    {
        sc_case c = {.B = 3, .Hq = 2, .Hkv = 2, .Tq = 9, .Tkv = 20, .Dk = 8, .Dv = 8,
                     .lens = SC_LENS_PADDED, .dt = {0, 0, 0, SDPA_F16}, .seed = 5};
        sc_tensors t;
        if (th_run_case_with(&c, "padding rows", NULL, NULL, &t)) {
            int ok = 1;
            for (int64_t b = 0; b < c.B; b++)
                for (int64_t h = 0; h < c.Hq; h++)
                    for (int64_t i = t.qlens[b]; i < c.Tq; i++)
                        ok &= row_is_empty(&t, &c, b, h, i);
            for (int64_t h = 0; h < c.Hq; h++) /* entry 1 has no keys: every row empty */
                for (int64_t i = 0; i < t.qlens[1]; i++)
                    ok &= row_is_empty(&t, &c, 1, h, i);
            CHECK(ok, "padding rows and key-less entries must be +0 with lse -inf");
            sc_tensors_free(&t);
        }
    }
    /* with sinks on: a padding row is not a row, its lse is -inf (not the sink logit);
     * a real row that sees nothing has the sink logit as its lse, exactly */
    {
        sc_case c = {.B = 2, .Hq = 3, .Hkv = 1, .Tq = 9, .Tkv = 20, .Dk = 8, .Dv = 8,
                     .lens = SC_LENS_PADDED, .sinks = 1, .causal = 2, .seed = 15};
        sc_tensors t;
        if (th_run_case_with(&c, "padding rows with sinks", NULL, NULL, &t)) {
            int ok = 1;
            for (int64_t b = 0; b < c.B; b++)
                for (int64_t h = 0; h < c.Hq; h++)
                    for (int64_t i = 0; i < c.Tq; i++) {
                        const float lse = t.lse[(b * c.Hq + h) * c.Tq + i];
                        if (i >= t.qlens[b])
                            ok &= lse == -INFINITY && row_is_zero(&t, &c, b, h, i);
                        else if (t.kvlens[b] == 0) /* entry 1: real rows, no keys */
                            ok &= lse == t.sinks[h] && row_is_empty(&t, &c, b, h, i);
                    }
            CHECK(ok, "with sinks: padding rows must have lse -inf, key-less real rows the "
                  "sink logit");
            sc_tensors_free(&t);
        }
    }
    /* a window that excludes everything for the first rows: non-causal window (0, 0)
     * with Tq > Tkv aligns row i to key i - (Tq - Tkv), before key 0 for the first rows */
    for (int sinks = 0; sinks < 2; sinks++) {
        sc_case c = {.B = 1, .Hq = 2, .Hkv = 1, .Tq = 50, .Tkv = 20, .Dk = 8, .Dv = 8,
                     .window = 1, .sinks = sinks, .seed = 6};
        sc_tensors t;
        if (th_run_case_with(&c, "window excluding everything", NULL, NULL, &t)) {
            int ok = 1;
            for (int64_t h = 0; h < c.Hq; h++)
                for (int64_t i = 0; i < c.Tq - c.Tkv; i++)
                    ok &= row_is_empty(&t, &c, 0, h, i);
            CHECK(ok, "rows a window excludes entirely must be +0 with lse %s",
                  sinks ? "= the sink" : "-inf");
            sc_tensors_free(&t);
        }
    }
    /* a mask row of all zeros: row 3 of every head (harness) */
    for (int kind = SDPA_MASK_ADDITIVE; kind <= SDPA_MASK_BOOL; kind++) {
        sc_case c = {.B = 2, .Hq = 2, .Hkv = 2, .Tq = 9, .Tkv = 100, .Dk = 8, .Dv = 8,
                     .mask = kind, .mask_hidden = 0.2f, .seed = 7};
        sc_tensors t;
        if (th_run_case_with(&c, "mask row of all zeros", NULL, NULL, &t)) {
            int ok = 1;
            for (int64_t b = 0; b < c.B; b++)
                for (int64_t h = 0; h < c.Hq; h++)
                    ok &= row_is_empty(&t, &c, b, h, 3);
            CHECK(ok, "a fully masked %s mask row must be +0 with lse -inf",
                  kind == SDPA_MASK_BOOL ? "boolean" : "additive");
            sc_tensors_free(&t);
        }
    }
}

/* NaN and inf in V rows that a mask hides from every row that would read them in the
 * same block: the output stays finite (masking is exact, 0 * NaN never happens). */
typedef struct poison {
    int64_t key;
    int last_only; /* 1: the row's last element (inf) alone, not its first (NaN) */
} poison;

static void fill_poison(sc_tensors *t, const sc_case *c, void *ctx) {
    const poison *ps = ctx;
    for (int64_t b = 0; b < t->VB; b++)
        for (int64_t h = 0; h < c->Hkv; h++) {
            const sdpa_tensor r = sc_view_at(&t->v, b, h, ps->key);
            if (r.dtype == SDPA_F32) {
                float *v = r.data;
                if (!ps->last_only)
                    v[0] = NAN;
                v[c->Dv - 1] = INFINITY;
            } else { /* binary16 or bfloat16: a quiet NaN and +inf */
                uint16_t *v = r.data;
                const int f16 = r.dtype == SDPA_F16;
                if (!ps->last_only)
                    v[0] = f16 ? 0x7e00u : 0x7fc0u;
                v[c->Dv - 1] = f16 ? 0x7c00u : 0x7f80u;
            }
        }
    if (t->desc.mask.kind == SDPA_MASK_BOOL) { /* hide the key from every row */
        const sdpa_mask *m = &t->desc.mask;
        for (int64_t b = 0; b < c->B; b++)
            for (int64_t h = 0; h < c->Hq; h++)
                for (int64_t i = 0; i < c->Tq; i++)
                    ((uint8_t *)t->mask)[b * m->stride_b + h * m->stride_h + i * m->stride_q +
                                         ps->key] = 0;
    }
}

static void hidden_values(void) {
    /* hidden by a boolean mask */
    {
        sc_case c = {.B = 1, .Hq = 2, .Hkv = 1, .Tq = 40, .Tkv = 90, .Dk = 16, .Dv = 16,
                     .mask = SDPA_MASK_BOOL, .mask_hidden = 0.1f, .seed = 8};
        poison ps = {70, 0};
        th_run_case_with(&c, "non-finite V behind a boolean mask", fill_poison, &ps, NULL);
    }
    /* beyond kv_lens (never read), beyond the window, above the causal diagonal */
    {
        sc_case c = {.B = 3, .Hq = 2, .Hkv = 1, .Tq = 30, .Tkv = 90, .Dk = 16, .Dv = 16,
                     .lens = SC_LENS_KV, .seed = 9};
        poison ps = {89, 0};
        th_run_case_with(&c, "non-finite V beyond kv_lens", fill_poison, &ps, NULL);
        c.lens = 0;
        c.window = 1;
        c.wl = 10;
        c.wr = 0;
        ps.key = 20; /* rows 0..19 (diagonal 60..79) never see key 20 */
        th_run_case_with(&c, "non-finite V outside the window", fill_poison, &ps, NULL);
    }
    /* above the causal diagonal, in a block the rows before it see in part (its other
     * keys): those rows stay finite, the later ones carry the NaN and inf (the
     * reference's positions); V as fp32, f16 with an odd Dv and bf16, so the check of a
     * block's V for non-finite elements meets whole vectors, a tail and both 16-bit
     * encodings; its rows back to back (one run) and with gaps between them (row by
     * row, each with its tail), poisoned at the first and last element or at the last
     * alone (row by row: f16 Dv 9's in a tail of 2 bytes, bf16 Dv 40's in the 16 bytes
     * after the 64 of two vectors) */
    {
        static const sdpa_dtype vdt[] = {SDPA_F32, SDPA_F16, SDPA_BF16};
        static const int64_t dv[] = {16, 9, 40};
        static const int layouts[] = {SC_BHTD, SC_PADDED};
        for (int l = 0; l < 2; l++)
            for (int k = 0; k < 3; k++) {
                sc_case c = {.B = 1, .Hq = 2, .Hkv = 1, .Tq = 130, .Tkv = 130, .Dk = 16,
                             .Dv = dv[k], .causal = 1, .layout = layouts[l],
                             .seed = 11 + (uint64_t)k};
                c.dt[1] = c.dt[2] = vdt[k];
                /* block 64..127: rows 64..69 see keys 64.. before it */
                for (int last = 0; last < 2; last++) {
                    poison ps = {70, last};
                    th_run_case_with(&c, "non-finite V above the causal diagonal",
                                     fill_poison, &ps, NULL);
                }
            }
    }
}

/* Blocks outside a window, or hidden by an all-zero mask region, are not computed. */
static void skipping(void) {
    sc_case c = {.B = 1, .Hq = 1, .Hkv = 1, .Tq = 2048, .Tkv = 2048, .Dk = 8, .Dv = 8,
                 .causal = 1, .window = 1, .wl = 100, .seed = 10};
    sdpa_stats st = {0};
    sc_tensors t;
    th_tensors_make(&t, &c);
    t.desc.stats = &st;
    if (CHECK(sdpa_forward(&t.desc, &t.q, &t.k, &t.v, &t.o, t.lse) == SDPA_OK, "window call")) {
        /* a query block of Br rows sees keys [i0 - 100, i0 + Br): at most
         * ceil((Br + 100) / Bc) + 1 blocks */
        const int64_t nqb = (c.Tq + st.block_q - 1) / st.block_q;
        const int64_t per = (st.block_q + 100 + st.block_kv - 1) / st.block_kv + 1;
        CHECK(st.blocks_computed <= nqb * per && st.blocks_skipped > st.blocks_computed,
              "window 100 at T 2048: computed %lld blocks, at most %lld expected",
              (long long)st.blocks_computed, (long long)(nqb * per));
    }
    sc_tensors_free(&t);

    /* a boolean mask keeping only keys < 100: blocks beyond are skipped */
    sc_case m = {.B = 1, .Hq = 2, .Hkv = 2, .Tq = 64, .Tkv = 1024, .Dk = 8, .Dv = 8,
                 .mask = SDPA_MASK_BOOL, .mask_bcast = SC_BCAST_ROWS, .seed = 11};
    th_tensors_make(&t, &m);
    for (int64_t h = 0; h < m.Hq; h++)
        for (int64_t j = 0; j < m.Tkv; j++)
            ((uint8_t *)t.mask)[h * t.desc.mask.stride_h + j] = j < 100;
    t.desc.stats = &st;
    if (CHECK(sdpa_forward(&t.desc, &t.q, &t.k, &t.v, &t.o, t.lse) == SDPA_OK, "mask call")) {
        const int64_t per = (100 + st.block_kv - 1) / st.block_kv;
        CHECK(st.blocks_computed == st.work_items * per,
              "mask keeping 100 of 1024 keys: computed %lld blocks, expected %lld",
              (long long)st.blocks_computed, (long long)(st.work_items * per));
    }
    sc_tensors_free(&t);
}

void suite_features(void) {
    masks();
    lengths();
    windows();
    modifiers();
    top_left();
    dtypes();
    dropout();
    combinations(th_quick ? 40 : 150);
    fully_masked_rows();
    hidden_values();
    skipping();
}
