/*
 * test_plan.c - the plan API and sdpa_merge.
 *
 * Plans: every shape class the driver plans differently (prefill with causal skipping,
 * decode split into key chunks with grouped GQA rows, packed varlen with rows no sequence
 * owns, every feature at once, 16-bit storage) run through sdpa_plan_* from one thread in
 * order, from one thread in a random order, and from a pthreads pool whose workers take
 * units as they come; each must give the same bits as sdpa_forward, and the same work
 * counters. (sdpa_plan_run carves its scratch afresh for each unit, so its items pack
 * every K block themselves, where sdpa_forward's workers keep packed blocks for the next
 * items of a (b, hk): the same bits, tile.c's kpc_slot.) Errors: the statuses of
 * sdpa_forward, and the run functions' own checks.
 *
 * Merging: the keys of a problem cut into disjoint shards, each shard's partial (o, lse)
 * computed by sdpa_forward, merged by sdpa_merge, against sdpa_forward over all keys
 * (the fp32 tolerance of DESIGN section 6); in place into the first part; the edge cases
 * (an empty part, all parts empty, NaN) and the refused overlaps. Runs per ISA.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "suites.h"

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- a problem from the public API alone ------------------------------------------- */

typedef struct prob {
    sdpa_desc d;
    int64_t VB, Tq, Tkv;
    float *q, *k, *v, *o, *lse, *slopes, *sinks;
    uint8_t *mask;
    int64_t lens[8], cuq[9], cukv[9];
    sdpa_tensor tq, tk, tv, to;
} prob;

static float *rand_buf(size_t n, uint64_t *rng) {
    float *a = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        a[i] = sc_rand_float(rng);
    return a;
}

/* kind 0: prefill causal; 1: decode, split-KV, grouped GQA; 2: packed varlen with orphan
 * rows; 3: every feature (window, softcap, ALiBi, sinks, mask, kv_lens, dropout); 4: f16
 * K/V and bf16 output. */
static void prob_make(prob *p, int kind, uint64_t seed) {
    memset(p, 0, sizeof *p);
    uint64_t rng = seed;
    int64_t B = 2, Hq = 4, Hkv = 2, Tq = 150, Tkv = 150, Dk = 32, Dv = 24;
    sdpa_dtype kv = SDPA_F32, ot = SDPA_F32;
    switch (kind) {
    case 1: B = 1, Hq = 8, Hkv = 2, Tq = 1, Tkv = 5000; break;
    case 2: B = 3, Tq = 70, Tkv = 90; break;
    case 4: kv = SDPA_F16, ot = SDPA_BF16, Tq = 100, Tkv = 300; break;
    default: break;
    }
    p->d = (sdpa_desc){.batch = B, .heads_q = Hq, .heads_kv = Hkv, .len_q = Tq, .len_kv = Tkv,
                       .dim_qk = Dk, .dim_v = Dv, .isa = th_isa,
                       .causal = kind == 2 ? SDPA_CAUSAL_TOP_LEFT : SDPA_CAUSAL_BOTTOM_RIGHT};
    p->VB = B;
    if (kind == 2) { /* sequences of 20, 0 and 37 rows; 13 view rows no sequence owns */
        const int64_t ql[3] = {20, 0, 37}, kl[3] = {30, 10, 45};
        for (int b = 0; b < 3; b++) {
            p->cuq[b + 1] = p->cuq[b] + ql[b];
            p->cukv[b + 1] = p->cukv[b] + kl[b];
        }
        p->d.cu_seqlens_q = p->cuq;
        p->d.cu_seqlens_kv = p->cukv;
        p->VB = 1;
    }
    if (kind == 3) {
        p->d.window = 1, p->d.window_left = 40, p->d.window_right = 5;
        p->d.softcap = 20.0f;
        p->slopes = malloc((size_t)Hq * sizeof(float));
        p->sinks = malloc((size_t)Hq * sizeof(float));
        sdpa_alibi_slopes(Hq, 8.0f, p->slopes);
        for (int64_t h = 0; h < Hq; h++)
            p->sinks[h] = 0.5f * (float)h - 1.0f;
        p->d.alibi_slopes = p->slopes;
        p->d.sinks = p->sinks;
        p->mask = malloc((size_t)(Tq * Tkv));
        for (int64_t e = 0; e < Tq * Tkv; e++)
            p->mask[e] = (sc_rand_u64(&rng) % 10) != 0;
        p->d.mask = (sdpa_mask){.data = p->mask, .kind = SDPA_MASK_BOOL, .stride_q = Tkv};
        p->lens[0] = Tkv, p->lens[1] = 77;
        p->d.kv_lens = p->lens;
        p->d.dropout_p = 0.2f, p->d.dropout_seed = seed;
    }
    p->Tq = Tq, p->Tkv = Tkv;
    const size_t nq = (size_t)(p->VB * Hq * Tq * Dk), nk = (size_t)(p->VB * Hkv * Tkv * Dk);
    const size_t nv = (size_t)(p->VB * Hkv * Tkv * Dv), no = (size_t)(p->VB * Hq * Tq * Dv);
    p->q = rand_buf(nq, &rng);
    p->k = rand_buf(nk, &rng);
    p->v = rand_buf(nv, &rng);
    if (kv == SDPA_F16) { /* the same values rounded into 16-bit storage, in place */
        uint16_t *k16 = (uint16_t *)(void *)p->k, *v16 = (uint16_t *)(void *)p->v;
        for (size_t i = 0; i < nk; i++)
            k16[i] = (uint16_t)(0x3000 + (sc_rand_u64(&rng) & 0x0fff));
        for (size_t i = 0; i < nv; i++)
            v16[i] = (uint16_t)(0x3000 + (sc_rand_u64(&rng) & 0x0fff));
    }
    p->o = malloc(no * sizeof(float));
    p->lse = malloc((size_t)(p->VB * Hq * Tq) * sizeof(float));
    p->tq = sdpa_tensor_bhtd(p->q, SDPA_F32, Hq, Tq, Dk);
    p->tk = sdpa_tensor_bhtd(p->k, kv, Hkv, Tkv, Dk);
    p->tv = sdpa_tensor_bhtd(p->v, kv, Hkv, Tkv, Dv);
    p->to = sdpa_tensor_bhtd(p->o, ot, Hq, Tq, Dv);
}

static size_t out_bytes(const prob *p) {
    return (size_t)(p->VB * p->d.heads_q * p->Tq * p->d.dim_v) * sdpa_dtype_size(p->to.dtype);
}

static void prob_free(prob *p) {
    free(p->q), free(p->k), free(p->v), free(p->o), free(p->lse);
    free(p->slopes), free(p->sinks), free(p->mask);
}

/* ---- drivers of a plan ----------------------------------------------------------------- */

static void *aligned_scratch(size_t bytes) {
    return aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
}

/* One thread, units in order or (shuffle) in a random order. */
static sdpa_status run_serial(sdpa_plan *pl, int shuffle, uint64_t seed) {
    void *scr = aligned_scratch(sdpa_plan_scratch_size(pl));
    sdpa_status st = SDPA_OK;
    for (int phase = 0; phase < 2; phase++) {
        const int64_t n = phase ? sdpa_plan_finish_units(pl) : sdpa_plan_units(pl);
        int64_t *order = malloc((size_t)(n + 1) * sizeof(int64_t));
        for (int64_t u = 0; u < n; u++)
            order[u] = u;
        for (int64_t u = n - 1; shuffle && u > 0; u--) { /* Fisher-Yates */
            const int64_t j = (int64_t)(sc_rand_u64(&seed) % (uint64_t)(u + 1));
            const int64_t t = order[u];
            order[u] = order[j];
            order[j] = t;
        }
        for (int64_t u = 0; u < n && st == SDPA_OK; u++)
            st = phase ? sdpa_plan_finish(pl, order[u], scr) : sdpa_plan_run(pl, order[u], scr);
        free(order);
    }
    free(scr);
    return st;
}

/* A pool of pthreads, each with its own scratch, taking the next unit from a shared
 * counter (so the interleaving differs run to run), with a barrier between the phases. */
typedef struct pool {
    sdpa_plan *pl;
    atomic_llong next[2];
    pthread_barrier_t phase;
    atomic_int failed;
} pool;

static void *worker(void *arg) {
    pool *po = arg;
    void *scr = aligned_scratch(sdpa_plan_scratch_size(po->pl));
    for (int phase = 0; phase < 2; phase++) {
        const int64_t n = phase ? sdpa_plan_finish_units(po->pl) : sdpa_plan_units(po->pl);
        for (int64_t u; (u = atomic_fetch_add(&po->next[phase], 1)) < n;) {
            const sdpa_status st =
                phase ? sdpa_plan_finish(po->pl, u, scr) : sdpa_plan_run(po->pl, u, scr);
            if (st != SDPA_OK)
                atomic_store(&po->failed, 1);
        }
        pthread_barrier_wait(&po->phase);
    }
    free(scr);
    return NULL;
}

static sdpa_status run_pool(sdpa_plan *pl, int workers) {
    pool po = {.pl = pl};
    atomic_init(&po.next[0], 0);
    atomic_init(&po.next[1], 0);
    atomic_init(&po.failed, 0);
    pthread_barrier_init(&po.phase, NULL, (unsigned)workers);
    pthread_t th[8];
    for (int i = 0; i < workers; i++)
        pthread_create(&th[i], NULL, worker, &po);
    for (int i = 0; i < workers; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&po.phase);
    return atomic_load(&po.failed) ? SDPA_ERR_BAD_ARGUMENT : SDPA_OK;
}

static void plans_match_forward(void) {
    static const char *kinds[] = {"prefill causal", "decode split-KV grouped",
                                  "packed varlen with orphan rows", "every feature",
                                  "f16 K/V, bf16 out"};
    for (int kind = 0; kind < N(kinds); kind++) {
        prob p;
        prob_make(&p, kind, 300 + (uint64_t)kind);
        sdpa_stats fs = {0};
        p.d.stats = &fs;
        memset(p.o, 0x33, out_bytes(&p));
        const sdpa_status sf = sdpa_forward(&p.d, &p.tq, &p.tk, &p.tv, &p.to, p.lse);
        const size_t ob = out_bytes(&p), lb = (size_t)(p.VB * p.d.heads_q * p.Tq) * sizeof(float);
        char *want_o = malloc(ob), *want_l = malloc(lb);
        memcpy(want_o, p.o, ob);
        memcpy(want_l, p.lse, lb);
        if (!CHECK(sf == SDPA_OK, "%s: sdpa_forward %d", kinds[kind], sf)) {
            free(want_o), free(want_l), prob_free(&p);
            continue;
        }
        static const char *drivers[] = {"one thread in order", "one thread shuffled",
                                        "4 pthreads", "2 pthreads"};
        for (int drv = 0; drv < 4; drv++) {
            memset(p.o, 0x33, ob);
            memset(p.lse, 0x33, lb);
            sdpa_plan *pl = NULL;
            sdpa_status st = sdpa_plan_create(&p.d, &p.tq, &p.tk, &p.tv, &p.to, p.lse, &pl);
            if (st == SDPA_OK)
                st = drv < 2 ? run_serial(pl, drv, 77 + (uint64_t)kind)
                             : run_pool(pl, drv == 2 ? 4 : 2);
            sdpa_stats ps = {0};
            if (st == SDPA_OK)
                st = sdpa_plan_stats(pl, &ps);
            const int same = st == SDPA_OK && memcmp(p.o, want_o, ob) == 0 &&
                             memcmp(p.lse, want_l, lb) == 0;
            const int counters = ps.blocks_computed == fs.blocks_computed &&
                                 ps.blocks_total == fs.blocks_total &&
                                 ps.blocks_masked == fs.blocks_masked &&
                                 ps.work_items == fs.work_items && ps.threads == 0;
            CHECK(same && counters,
                  "%s, plan on %s (%lld units, %lld finishing): status %d, %s, counters %s",
                  kinds[kind], drivers[drv], (long long)sdpa_plan_units(pl),
                  (long long)sdpa_plan_finish_units(pl), st,
                  same ? "same bits as sdpa_forward" : "DIFFERENT from sdpa_forward",
                  counters ? "equal" : "differ");
            if (kind == 1 && drv == 0)
                CHECK(sdpa_plan_finish_units(pl) > 0 && sdpa_plan_units(pl) > 1,
                      "decode against 5000 keys must split into chunks and merges");
            if (kind == 2 && drv == 0)
                CHECK(sdpa_plan_finish_units(pl) == 1, "varlen with orphan rows has one "
                      "finishing unit for them, got %lld", (long long)sdpa_plan_finish_units(pl));
            sdpa_plan_destroy(pl);
        }
        free(want_o), free(want_l);
        prob_free(&p);
    }
}

static void plan_errors(void) {
    prob p;
    prob_make(&p, 0, 9);
    sdpa_plan *pl = (sdpa_plan *)(uintptr_t)1;
    sdpa_desc bad = p.d;
    bad.heads_kv = 3;
    memset(p.o, 0x5A, out_bytes(&p));
    CHECK(sdpa_plan_create(&bad, &p.tq, &p.tk, &p.tv, &p.to, p.lse, &pl) == SDPA_ERR_BAD_HEADS &&
              pl == NULL,
          "plan of an invalid descriptor: the status of sdpa_forward and a NULL plan");
    bad = p.d;
    bad.isa = SDPA_ISA_COUNT_;
    CHECK(sdpa_plan_create(&bad, &p.tq, &p.tk, &p.tv, &p.to, p.lse, &pl) == SDPA_ERR_BAD_ARGUMENT,
          "plan with an isa outside the enum");
    CHECK(sdpa_plan_create(&p.d, &p.tq, &p.tk, &p.tv, &p.to, p.lse, NULL) == SDPA_ERR_NULL_POINTER,
          "plan without an out pointer");
    int untouched = 1;
    for (size_t i = 0; i < out_bytes(&p); i++)
        untouched &= ((uint8_t *)p.o)[i] == 0x5A;
    CHECK(untouched, "a refused plan must not write o");
    if (CHECK(sdpa_plan_create(&p.d, &p.tq, &p.tk, &p.tv, &p.to, p.lse, &pl) == SDPA_OK, "plan")) {
        char *scr = aligned_scratch(sdpa_plan_scratch_size(pl));
        const int64_t n = sdpa_plan_units(pl);
        CHECK(sdpa_plan_run(pl, n, scr) == SDPA_ERR_BAD_ARGUMENT &&
                  sdpa_plan_run(pl, -1, scr) == SDPA_ERR_BAD_ARGUMENT &&
                  sdpa_plan_finish(pl, sdpa_plan_finish_units(pl), scr) == SDPA_ERR_BAD_ARGUMENT &&
                  sdpa_plan_run(pl, 0, NULL) == SDPA_ERR_NULL_POINTER &&
                  sdpa_plan_run(NULL, 0, scr) == SDPA_ERR_NULL_POINTER &&
                  sdpa_plan_run(pl, 0, scr + 8) == SDPA_ERR_MISALIGNED &&
                  sdpa_plan_stats(pl, NULL) == SDPA_ERR_NULL_POINTER,
              "plan run: unit out of range, NULL or misaligned scratch must be refused");
        free(scr);
        sdpa_plan_destroy(pl);
    }
    sdpa_plan_destroy(NULL);
    CHECK(sdpa_plan_units(NULL) == 0 && sdpa_plan_scratch_size(NULL) == 0, "NULL plan queries");
    prob_free(&p);
}

/* ---- sdpa_merge ------------------------------------------------------------------------ */

/* |x - r| <= 1e-5 + 1e-4 |r| (DESIGN section 6), NaN where r is NaN. */
static int close_to(float x, float r) {
    if (isnan(r))
        return isnan(x);
    if (isinf(r))
        return x == r;
    return fabs((double)x - (double)r) <= 1e-5 + 1e-4 * fabs((double)r);
}

/* Keys of one (non-causal) problem cut into n contiguous shards at the given cuts; each
 * shard's partial through sdpa_forward on a view of its keys; merged; against sdpa_forward
 * over all keys. Shard s sees keys [cut[s], cut[s+1]); an empty shard is modelled as a
 * one-key view whose key a boolean mask hides (lse -inf, o = 0). */
static void merge_shards(int n, const int64_t *cut, int inplace, const char *what) {
    enum { B = 2, H = 3, TQ = 17, TKV = 400, D = 40 };
    uint64_t rng = 4242 + (uint64_t)n;
    float *q = rand_buf(B * H * TQ * D, &rng), *k = rand_buf(B * H * TKV * D, &rng);
    float *v = rand_buf(B * H * TKV * D, &rng), *o = malloc(B * H * TQ * D * sizeof(float));
    float lse[B * H * TQ];
    const sdpa_desc full = {.batch = B, .heads_q = H, .heads_kv = H, .len_q = TQ,
                            .len_kv = TKV, .dim_qk = D, .dim_v = D, .isa = th_isa};
    const sdpa_tensor tq = sdpa_tensor_bhtd(q, SDPA_F32, H, TQ, D);
    const sdpa_tensor tk = sdpa_tensor_bhtd(k, SDPA_F32, H, TKV, D);
    const sdpa_tensor tv = sdpa_tensor_bhtd(v, SDPA_F32, H, TKV, D);
    const sdpa_tensor to = sdpa_tensor_bhtd(o, SDPA_F32, H, TQ, D);
    sdpa_status st = sdpa_forward(&full, &tq, &tk, &tv, &to, lse);
    float *po[8], *pl[8];
    sdpa_tensor parts[8];
    const float *lps[8];
    uint8_t none = 0;
    for (int s = 0; s < n && st == SDPA_OK; s++) {
        po[s] = malloc(B * H * TQ * D * sizeof(float));
        pl[s] = malloc(B * H * TQ * sizeof(float));
        sdpa_desc d = full;
        const int64_t len = cut[s + 1] - cut[s];
        d.len_kv = len > 0 ? len : 1;
        if (len == 0)
            d.mask = (sdpa_mask){.data = &none, .kind = SDPA_MASK_BOOL};
        sdpa_tensor sk = tk, sv = tv;
        sk.data = k + cut[s] * D;
        sv.data = v + cut[s] * D;
        parts[s] = sdpa_tensor_bhtd(po[s], SDPA_F32, H, TQ, D);
        lps[s] = pl[s];
        st = sdpa_forward(&d, &tq, &sk, &sv, &parts[s], pl[s]);
    }
    float *mo = inplace ? po[0] : malloc(B * H * TQ * D * sizeof(float));
    float *ml = inplace ? pl[0] : malloc(B * H * TQ * sizeof(float));
    const sdpa_tensor tm = sdpa_tensor_bhtd(mo, SDPA_F32, H, TQ, D);
    const sdpa_merge_desc md = {.batch = B, .heads = H, .len = TQ, .dim = D, .parts = n};
    if (st == SDPA_OK)
        st = sdpa_merge(&md, parts, lps, &tm, ml);
    int bad = 0;
    for (int e = 0; e < B * H * TQ * D && st == SDPA_OK; e++)
        bad += !close_to(mo[e], o[e]);
    for (int e = 0; e < B * H * TQ && st == SDPA_OK; e++)
        bad += !close_to(ml[e], lse[e]);
    CHECK(st == SDPA_OK && bad == 0, "merge of %d shards (%s%s): status %d, %d off", n, what,
          inplace ? ", in place" : "", st, bad);
    for (int s = 0; s < n; s++)
        free(po[s]), free(pl[s]);
    if (!inplace)
        free(mo), free(ml);
    free(q), free(k), free(v), free(o);
}

static void merge_edges(void) {
    enum { R = 3, D = 5 };
    float a[R * D], b[R * D], out[R * D];
    float la[R] = {0.5f, -INFINITY, NAN}, lb[R] = {-INFINITY, -INFINITY, 1.0f}, lo[R];
    for (int i = 0; i < R * D; i++) {
        a[i] = (float)i;
        b[i] = NAN; /* part b's rows 0 and 1 saw nothing: its O must not be read */
    }
    const sdpa_tensor pa = sdpa_tensor_bhtd(a, SDPA_F32, 1, R, D);
    const sdpa_tensor pb = sdpa_tensor_bhtd(b, SDPA_F32, 1, R, D);
    const sdpa_tensor parts[2] = {pa, pb};
    const float *ls[2] = {la, lb};
    const sdpa_tensor to = sdpa_tensor_bhtd(out, SDPA_F32, 1, R, D);
    const sdpa_merge_desc md = {.batch = 1, .heads = 1, .len = R, .dim = D, .parts = 2};
    const sdpa_status st = sdpa_merge(&md, parts, ls, &to, lo);
    int ok = st == SDPA_OK && lo[0] == 0.5f && lo[1] == -INFINITY && isnan(lo[2]);
    for (int d = 0; d < D; d++)
        ok &= out[d] == a[d] && out[D + d] == 0.0f && isnan(out[2 * D + d]);
    CHECK(ok, "merge edges: an empty part adds nothing (even NaN O), all empty gives 0 and "
          "-inf, a NaN lse propagates (status %d)", st);
    /* overlaps: output over part 1, lse over part 0's O, a shifted view of part 0 */
    sdpa_tensor shifted = pa;
    shifted.data = a + 1;
    const struct {
        const sdpa_tensor *o;
        float *l;
    } bad[] = {{&pb, lo}, {&to, a}, {&shifted, lo}};
    for (int i = 0; i < N(bad); i++)
        CHECK(sdpa_merge(&md, parts, ls, bad[i].o, bad[i].l) == SDPA_ERR_OVERLAP,
              "merge overlap case %d must be refused", i);
    sdpa_merge_desc z = md;
    z.parts = 0;
    CHECK(sdpa_merge(&z, parts, ls, &to, lo) == SDPA_ERR_BAD_DIMENSION &&
              sdpa_merge(&md, parts, NULL, &to, lo) == SDPA_ERR_NULL_POINTER,
          "merge argument checks");
}

static void merges(void) {
    const int64_t two[] = {0, 150, 400}, four[] = {0, 1, 99, 300, 400};
    const int64_t empty[] = {0, 200, 200, 400}; /* the middle shard has no key */
    const int64_t whole[] = {0, 400};
    merge_shards(2, two, 0, "150 + 250 keys");
    merge_shards(4, four, 0, "1 + 98 + 201 + 100 keys");
    merge_shards(4, four, 1, "1 + 98 + 201 + 100 keys");
    merge_shards(3, empty, 0, "an empty shard");
    merge_shards(1, whole, 1, "one part");
    merge_edges();
}

void suite_plan(void) {
    plans_match_forward();
    plan_errors();
    merges();
}
