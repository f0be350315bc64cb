/*
 * test_fused.c - the fused path against the reference over the shape sweeps of DESIGN
 * section 6, the layouts, the thread counts (and bit-identical results across them),
 * and the causal block-skip counters.
 *
 * Every buffer ends on an unmapped page (harness), so any over-read in any case faults.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "suites.h"

static const int64_t sweep_T[] = {1, 2, 7, 16, 17, 63, 64, 65, 113, 129, 257, 1000};
static const int64_t sweep_D[] = {1, 3, 8, 16, 17, 64, 80, 96, 128, 256};
#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

static uint64_t seed_of(int64_t a, int64_t b, int64_t c) {
    return (uint64_t)(a * 1000003 + b * 1009 + c * 7 + 1);
}

void suite_sweep(void) {
    char label[64];
    /* T around the tile edges, Tq = Tkv, with GQA 2:1 */
    for (int t = 0; t < N(sweep_T); t++)
        for (int causal = 0; causal < 2; causal++) {
            const int64_t T = sweep_T[t];
            if (th_quick && T > 257)
                continue;
            sc_case c = {.B = 1, .Hq = 2, .Hkv = 1, .Tq = T, .Tkv = T, .Dk = 64, .Dv = 64,
                         .causal = causal, .seed = seed_of(T, causal, 1)};
            snprintf(label, sizeof label, "T sweep");
            th_run_case(&c, label);
        }
    /* D around the vector widths, Dk = Dv */
    for (int d = 0; d < N(sweep_D); d++)
        for (int causal = 0; causal < 2; causal++) {
            const int64_t D = sweep_D[d];
            sc_case c = {.B = 2, .Hq = 2, .Hkv = 2, .Tq = 65, .Tkv = 65, .Dk = D, .Dv = D,
                         .causal = causal, .seed = seed_of(D, causal, 2)};
            th_run_case(&c, "D sweep");
        }
    /* Dk != Dv */
    static const int64_t dkdv[][2] = {{3, 17}, {64, 80}, {17, 128}, {256, 1}, {80, 96}, {1, 64}};
    for (int i = 0; i < N(dkdv); i++)
        for (int causal = 0; causal < 2; causal++) {
            sc_case c = {.B = 1, .Hq = 3, .Hkv = 3, .Tq = 113, .Tkv = 129, .Dk = dkdv[i][0],
                         .Dv = dkdv[i][1], .causal = causal, .seed = seed_of(i, causal, 3)};
            th_run_case(&c, "Dk != Dv");
        }
    /* Tq != Tkv, including Tq = 1 (decode) and Tq > Tkv (causal rows with no key) */
    static const int64_t tqtkv[][2] = {{1, 1},    {1, 129},  {1, 1000}, {7, 65},
                                       {65, 7},   {16, 1000}, {113, 257}, {257, 113},
                                       {1000, 17}, {2, 1},   {64, 65},  {65, 64}};
    for (int i = 0; i < N(tqtkv); i++)
        for (int causal = 0; causal < 2; causal++) {
            sc_case c = {.B = 2, .Hq = 2, .Hkv = 1, .Tq = tqtkv[i][0], .Tkv = tqtkv[i][1],
                         .Dk = 40, .Dv = 24, .causal = causal, .seed = seed_of(i, causal, 4)};
            th_run_case(&c, "Tq != Tkv");
        }
    /* GQA ratios 1, 2, 4, 8 (Hkv = 1 is MQA) */
    static const int64_t hkv[] = {8, 4, 2, 1};
    for (int i = 0; i < N(hkv); i++)
        for (int causal = 0; causal < 2; causal++) {
            sc_case c = {.B = 2, .Hq = 8, .Hkv = hkv[i], .Tq = 65, .Tkv = 129, .Dk = 64,
                         .Dv = 64, .causal = causal, .seed = seed_of(hkv[i], causal, 5)};
            th_run_case(&c, "GQA");
        }
    /* explicit scales, including a negative one */
    static const float scales[] = {1.0f, 0.01f, -0.3f, 3.0f};
    for (int i = 0; i < N(scales); i++) {
        sc_case c = {.B = 1, .Hq = 2, .Hkv = 2, .Tq = 33, .Tkv = 70, .Dk = 16, .Dv = 16,
                     .causal = i & 1, .scale = scales[i], .seed = seed_of(i, 0, 6)};
        th_run_case(&c, "scale");
    }
}

/* Decode over K/V stored tokens-major ([B, T, Hkv, D]), which the plan runs as one item
 * of every KV head of an entry, head after head in each key block (src/plan.c,
 * heads_together): against the reference with every feature that changes a row's keys or
 * scores, storage types, head dims, GQA ratios and lengths past the split-KV threshold
 * and the block sizes, each case also checked to have run as such items (stats:
 * one work item per batch entry). */
static void check_heads_together(const sc_case *c, const char *label) {
    th_run_case(c, label);
    sc_tensors t;
    th_tensors_make(&t, c);
    sdpa_stats st;
    t.desc.stats = &st;
    const sdpa_status s = sdpa_forward(&t.desc, &t.q, &t.k, &t.v, &t.o, t.lse);
    char buf[512];
    CHECK(s == SDPA_OK && st.work_items == c->B,
          "%s: %s: status %d, %lld work items (one a batch entry expected)", label,
          th_case_str(c, buf, sizeof buf), (int)s, (long long)st.work_items);
    sc_tensors_free(&t);
}

static void test_heads_together(void) {
    static const int64_t heads[][2] = {{4, 2}, {8, 4}, {16, 8}, {12, 3}, {32, 8}};
    static const int64_t dims[][2] = {{24, 17}, {128, 128}, {64, 64}, {1, 3}, {80, 96}};
    static const int64_t tkvs[] = {1, 15, 16, 17, 100, 1025, 4100};
    static const sdpa_dtype dts[] = {SDPA_F32, SDPA_F16, SDPA_BF16};
    int n = 0;
    for (int a = 0; a < N(heads); a++)
        for (int d = 0; d < N(dims); d++)
            for (int j = 0; j < N(tkvs); j++, n++) {
                if (heads[a][0] > 32 || (tkvs[j] > 1100 && dims[d][0] > 64 && a > 1))
                    continue; /* Hq within every table's Br; the long ones on few heads */
                if (th_quick && (tkvs[j] > 1100 || (a + d + j) % 3 != 0))
                    continue; /* under --quick (the sanitizer and valgrind runs) a third */
                const sdpa_dtype dt = dts[n % N(dts)];
                sc_case c = {.B = 2, .Hq = heads[a][0], .Hkv = heads[a][1], .Tq = 1,
                             .Tkv = tkvs[j], .Dk = dims[d][0], .Dv = dims[d][1],
                             .layout = SC_BTHD, .dt = {SDPA_F32, dt, dt, SDPA_F32},
                             .seed = seed_of(a, d * 16 + j, 21)};
                check_heads_together(&c, "heads together");
            }
    /* paged pools whose pages keep a token's heads together: pages of one token (any
     * layout), [page, Hkv, D] pages (SC_BTHD) of 3 and 16 tokens */
    static const int64_t pages[][2] = {{1, SC_BHTD}, {1, SC_BTHD}, {3, SC_BTHD}, {16, SC_BTHD}};
    for (int pg = 0; pg < N(pages); pg++)
        for (int j = 0; j < N(tkvs); j++) {
            if (th_quick && tkvs[j] > 1100)
                continue;
            const sdpa_dtype dt = dts[(pg + j) % N(dts)];
            sc_case c = {.B = 2, .Hq = 8, .Hkv = 4, .Tq = 1, .Tkv = tkvs[j], .Dk = 32, .Dv = 24,
                         .layout = (int)pages[pg][1], .page = pages[pg][0],
                         .lens = j % 2 ? SC_LENS_KV : SC_LENS_NONE,
                         .dt = {SDPA_F32, dt, dt, SDPA_F32}, .seed = seed_of(pg, j, 23)};
            check_heads_together(&c, "heads together, paged");
        }
    /* every feature on one shape that splits its keys and one that does not */
    for (int f = 0; f < 11; f++)
        for (int kind = 0; kind < 3; kind++) { /* short, split, paged one token a page */
            sc_case c = {.B = 3, .Hq = 8, .Hkv = 2, .Tq = 1, .Tkv = kind ? 1300 : 70,
                         .Dk = 32, .Dv = 24, .layout = SC_BTHD, .page = kind == 2,
                         .seed = seed_of(f, kind, 22)};
            switch (f) {
            case 0: c.causal = SDPA_CAUSAL_BOTTOM_RIGHT; break;
            case 1: c.causal = SDPA_CAUSAL_TOP_LEFT; break; /* key 0 only */
            case 2: c.window = 1; c.wl = 37; c.wr = 0; break;
            case 3: c.softcap = 5.0f; break;
            case 4: c.alibi = 1; break;
            case 5: c.sinks = 1; break;
            case 6: c.mask = SDPA_MASK_BOOL; c.mask_hidden = 0.3f; break;
            case 7:
                c.mask = SDPA_MASK_ADDITIVE;
                c.mask_hidden = 0.2f;
                c.mask_bcast = SC_BCAST_H;
                break;
            case 8: c.lens = SC_LENS_KV; break;
            case 9: c.lens = SC_LENS_PADDED; break; /* an entry with no query row */
            default: c.dropout = 0.25f; break;
            }
            check_heads_together(&c, "heads together, features");
        }
}

void suite_layout(void) {
    test_heads_together();
    static const int layouts[] = {SC_BTHD, SC_PADDED};
    for (int l = 0; l < N(layouts); l++)
        for (int causal = 0; causal < 2; causal++) {
            sc_case c = {.B = 2, .Hq = 4, .Hkv = 2, .Tq = 67, .Tkv = 131, .Dk = 24, .Dv = 17,
                         .causal = causal, .layout = layouts[l], .seed = seed_of(l, causal, 7)};
            th_run_case(&c, "layout");
            c.Tq = 1; /* decode row, strided */
            th_run_case(&c, "layout decode");
        }
    /* buffers that start right after an unmapped page, shifted off every alignment */
    static const int shifts[] = {0, 1, 3, 5, 15};
    for (int s = 0; s < N(shifts); s++) {
        sc_case c = {.B = 1, .Hq = 2, .Hkv = 1, .Tq = 70, .Tkv = 70, .Dk = 19, .Dv = 33,
                     .causal = s & 1, .guard = SC_GUARD_BEFORE, .misalign = shifts[s],
                     .layout = s % 3, .seed = seed_of(s, 0, 8)};
        th_run_case(&c, "guard before, misaligned");
    }
}

/* Fused output (o then lse, as bytes) of a case with a given thread count, copied out;
 * *bytes gets its size. */
static unsigned char *run_threads(const sc_case *c, int threads, sdpa_stats *st, size_t *bytes) {
    sc_tensors t;
    th_tensors_make(&t, c);
    t.desc.num_threads = threads;
    t.desc.stats = st;
    unsigned char *out = NULL;
    const size_t ob = t.elems[3] * (t.o.dtype == SDPA_F32 ? 4 : 2);
    *bytes = ob + t.elems[4] * sizeof(float);
    if (sdpa_forward(&t.desc, &t.q, &t.k, &t.v, &t.o, t.lse) == SDPA_OK) {
        out = malloc(*bytes);
        memcpy(out, t.o.data, ob);
        memcpy(out + ob, t.lse, t.elems[4] * sizeof(float));
    }
    sc_tensors_free(&t);
    return out;
}

void suite_threads(void) {
    const int nproc = th_nproc();
    const int counts[] = {1, 2, 3, nproc, 8};
    /* correctness at each thread count */
    for (int i = 0; i < 4; i++)
        for (int causal = 0; causal < 2; causal++) {
            sc_case c = {.B = 2, .Hq = 3, .Hkv = 3, .Tq = 200, .Tkv = 200, .Dk = 32, .Dv = 32,
                         .causal = causal, .threads = counts[i], .seed = seed_of(i, causal, 9)};
            th_run_case(&c, "threads");
        }
    /* split-KV decode against the reference at the chunk edges and far beyond, grouped
     * (GQA) and not */
    static const int64_t tkvs[] = {1, 511, 512, 513, 1023, 1024, 1025, 4096, 100000};
    for (int i = 0; i < N(tkvs); i++) {
        if (th_quick && tkvs[i] > 4096)
            continue;
        sc_case c = {.B = 1, .Hq = 8, .Hkv = 2, .Tq = 1, .Tkv = tkvs[i], .Dk = 64, .Dv = 48,
                     .causal = 1, .threads = 3, .seed = seed_of(i, 0, 12)};
        th_run_case(&c, "split-KV decode, GQA 4");
        c.Hkv = 8;
        c.Tq = 3;
        c.causal = i & 1;
        th_run_case(&c, "split-KV, Tq 3, no GQA");
    }
    /* the same bits for every thread count: prefill, decode (split-KV), grouped small-Tq
     * (speculative decoding), and the features on top */
    const sc_case shapes[] = {
        {.B = 1, .Hq = 3, .Hkv = 1, .Tq = 300, .Tkv = 300, .Dk = 40, .Dv = 40, .causal = 1},
        {.B = 2, .Hq = 4, .Hkv = 4, .Tq = 129, .Tkv = 257, .Dk = 64, .Dv = 48, .causal = 0},
        {.B = 1, .Hq = 8, .Hkv = 2, .Tq = 1, .Tkv = 5000, .Dk = 64, .Dv = 64, .causal = 1},
        {.B = 1, .Hq = 4, .Hkv = 4, .Tq = 1, .Tkv = 20000, .Dk = 32, .Dv = 32, .causal = 1},
        {.B = 2, .Hq = 8, .Hkv = 1, .Tq = 7, .Tkv = 3000, .Dk = 64, .Dv = 64, .causal = 1},
        {.B = 3, .Hq = 4, .Hkv = 2, .Tq = 5, .Tkv = 2000, .Dk = 32, .Dv = 32, .causal = 1,
         .lens = SC_LENS_PADDED, .sinks = 1, .window = 1, .wl = 700, .dt = {0, 1, 1, 0}},
        /* decode over a tokens-major cache: items of every KV head (plan.c, hgroup) */
        {.B = 2, .Hq = 8, .Hkv = 2, .Tq = 1, .Tkv = 3000, .Dk = 64, .Dv = 48, .causal = 1,
         .layout = SC_BTHD, .lens = SC_LENS_KV, .dt = {0, 1, 1, 0}},
    };
    for (int s = 0; s < N(shapes); s++) {
        sc_case c = shapes[s];
        c.seed = seed_of(s, 0, 10);
        sdpa_stats st1 = {0}, st;
        size_t n, n2;
        unsigned char *base = run_threads(&c, 1, &st1, &n);
        CHECK(base != NULL, "shape %d: 1-thread call failed", s);
        CHECK(st1.threads == 1, "shape %d: num_threads = 1 ran %d threads", s, st1.threads);
        for (int i = 1; i < N(counts) && base; i++) {
            unsigned char *x = run_threads(&c, counts[i], &st, &n2);
            CHECK(x && memcmp(x, base, n) == 0, "shape %d: %d threads differ from 1 thread", s,
                  counts[i]);
#ifdef _OPENMP
            CHECK(st.threads >= 1 && st.threads <= counts[i],
                  "shape %d: stats.threads %d not within the cap %d", s, st.threads, counts[i]);
#endif
            free(x);
        }
        free(base);
    }
    /* GQA grouping: a decode step is one item per K/V head, its rows the g query heads */
    {
        sc_case c = {.B = 2, .Hq = 32, .Hkv = 8, .Tq = 1, .Tkv = 256, .Dk = 16, .Dv = 16,
                     .causal = 1};
        sdpa_stats st = {0};
        size_t n;
        free(run_threads(&c, 1, &st, &n));
        CHECK(st.work_items == c.B * c.Hkv, "decode with 4 query heads per K/V head: %lld items,"
              " expected %lld (one per K/V head)", (long long)st.work_items,
              (long long)(c.B * c.Hkv));
        CHECK(st.blocks_computed == st.work_items * ((c.Tkv + st.block_kv - 1) / st.block_kv),
              "grouped decode computed %lld blocks", (long long)st.blocks_computed);
    }
    /* a seed-sized problem never enters a parallel region */
    sc_case tiny = {.B = 1, .Hq = 2, .Hkv = 2, .Tq = 6, .Tkv = 6, .Dk = 4, .Dv = 4, .causal = 1};
    sdpa_stats st;
    size_t n;
    free(run_threads(&tiny, 8, &st, &n));
    CHECK(st.threads == 1, "a 6x6 attention ran %d threads", st.threads);
#ifdef _OPENMP
    /* a large one does use the threads it is allowed */
    sc_case big = {.B = 1, .Hq = 4, .Hkv = 4, .Tq = 256, .Tkv = 256, .Dk = 64, .Dv = 64};
    free(run_threads(&big, 2, &st, &n));
    CHECK(st.threads == 2, "a 4x256x256x64 attention with num_threads = 2 ran %d threads",
          st.threads);
    /* called from inside the host's parallel region: no nested team, same bits */
    {
        size_t nb;
        unsigned char *ref = run_threads(&big, 1, &st, &nb);
        int inner_threads = 0, same = 1;
#pragma omp parallel num_threads(2) reduction(max : inner_threads) reduction(& : same)
        {
            sdpa_stats ist = {0};
            size_t ni;
            unsigned char *x = run_threads(&big, 0, &ist, &ni);
            inner_threads = ist.threads;
            same = x && ref && ni == nb && memcmp(x, ref, nb) == 0;
            free(x);
        }
        CHECK(inner_threads == 1 && same,
              "inside a parallel region: %d threads per call (must be 1), results %s",
              inner_threads, same ? "identical" : "DIFFER");
        free(ref);
    }
#endif
}

/* Blocks the driver must compute, counted independently of it: for each query block,
 * the key blocks up to the one holding the last visible key of its last row. */
static int64_t expected_computed(const sc_case *c, int br, int bc) {
    int64_t total = 0;
    for (int64_t i0 = 0; i0 < c->Tq; i0 += br) {
        const int64_t last = (i0 + br < c->Tq ? i0 + br : c->Tq) - 1;
        int64_t end = c->causal ? last + (c->Tkv - c->Tq) + 1 : c->Tkv;
        end = end < 0 ? 0 : (end > c->Tkv ? c->Tkv : end);
        total += (end + bc - 1) / bc;
    }
    return total * c->B * c->Hq;
}

void suite_skip(void) {
    const sc_case cases[] = {
        {.B = 1, .Hq = 1, .Hkv = 1, .Tq = 1024, .Tkv = 1024, .Dk = 16, .Dv = 16, .causal = 1},
        {.B = 1, .Hq = 1, .Hkv = 1, .Tq = 1024, .Tkv = 1024, .Dk = 16, .Dv = 16, .causal = 0},
        {.B = 2, .Hq = 2, .Hkv = 1, .Tq = 300, .Tkv = 1000, .Dk = 8, .Dv = 8, .causal = 1},
        {.B = 1, .Hq = 2, .Hkv = 2, .Tq = 1000, .Tkv = 300, .Dk = 8, .Dv = 8, .causal = 1},
        {.B = 1, .Hq = 4, .Hkv = 4, .Tq = 1, .Tkv = 777, .Dk = 8, .Dv = 8, .causal = 1},
    };
    for (int i = 0; i < N(cases); i++) {
        sc_case c = cases[i];
        c.seed = seed_of(i, 0, 11);
        sdpa_stats st = {0};
        sc_tensors t;
        th_tensors_make(&t, &c);
        t.desc.stats = &st;
        const sdpa_status s = sdpa_forward(&t.desc, &t.q, &t.k, &t.v, &t.o, t.lse);
        sc_tensors_free(&t);
        if (!CHECK(s == SDPA_OK, "case %d: %s", i, sdpa_strerror(s)))
            continue;
        const int64_t nqb = (c.Tq + st.block_q - 1) / st.block_q;
        const int64_t nkb = (c.Tkv + st.block_kv - 1) / st.block_kv;
        CHECK(st.isa == th_isa, "stats.isa %s, ran %s", sdpa_isa_name(st.isa),
              sdpa_isa_name(th_isa));
        CHECK(st.work_items == c.B * c.Hq * nqb && st.blocks_total == st.work_items * nkb,
              "case %d: items %lld total %lld", i, (long long)st.work_items,
              (long long)st.blocks_total);
        CHECK(st.blocks_computed + st.blocks_skipped == st.blocks_total,
              "case %d: computed + skipped != total", i);
        const int64_t want = expected_computed(&c, st.block_q, st.block_kv);
        CHECK(st.blocks_computed == want, "case %d: computed %lld blocks, expected %lld", i,
              (long long)st.blocks_computed, (long long)want);
        if (!c.causal)
            CHECK(st.blocks_skipped == 0 && st.blocks_masked == 0,
                  "case %d: non-causal skipped %lld masked %lld", i,
                  (long long)st.blocks_skipped, (long long)st.blocks_masked);
        if (i == 0) { /* the headline: causal T = 1024 computes about half the blocks */
            const double frac = (double)st.blocks_computed / (double)st.blocks_total;
            CHECK(frac > 0.45 && frac < 0.6, "causal T=1024 computed %.3f of the blocks", frac);
            CHECK(st.blocks_masked >= nqb && st.blocks_masked <= 2 * nqb,
                  "causal T=1024: %lld masked blocks for %lld query blocks",
                  (long long)st.blocks_masked, (long long)nqb);
            if (th_verbose)
                printf("  causal T=1024 Br=%d Bc=%d: %lld of %lld blocks computed (%.1f%%), "
                       "%lld masked\n",
                       st.block_q, st.block_kv, (long long)st.blocks_computed,
                       (long long)st.blocks_total, 100 * frac, (long long)st.blocks_masked);
        }
        if (i == 4) /* one decode row sees every key: nothing to skip */
            CHECK(st.blocks_skipped == 0, "decode row skipped %lld blocks",
                  (long long)st.blocks_skipped);
    }
}
