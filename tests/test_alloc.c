/*
 * test_alloc.c - running out of memory, at every allocation each entry point makes.
 *
 * Every allocation of the library goes through src/alloc.c, whose thread-local
 * injection makes the k-th one from now return NULL. For each entry point (and each
 * code path that allocates differently: serial, threaded, split-KV, paged and quantized
 * KV caches, the layer with and without a caller workspace), a clean call counts its
 * allocations N; then for every k <= N the call is repeated with the k-th failing and
 * must return SDPA_ERR_OUT_OF_MEMORY with every output byte as it was (plans:
 * sdpa_plan_create, where a plan allocates; sdpa_merge; sdpa_kv_write, whose outputs are
 * the cache and its scales). Leaks are the sanitizer build's to find (CI runs the suite
 * under ASan with leak detection). Runs per ISA.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "suites.h"

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* An entry point under test: runs once on prepared buffers, returns its status. */
typedef struct target {
    const char *name;
    sdpa_status (*call)(void *ctx);
    void *ctx;
    void *out[3];     /* outputs, and their sizes in bytes */
    size_t bytes[3];
} target;

static void fill_outputs(const target *t) {
    for (int i = 0; i < 3; i++)
        if (t->out[i])
            memset(t->out[i], 0x5A, t->bytes[i]);
}

static int outputs_untouched(const target *t) {
    for (int i = 0; i < 3; i++)
        for (size_t b = 0; t->out[i] && b < t->bytes[i]; b++)
            if (((const unsigned char *)t->out[i])[b] != 0x5A)
                return 0;
    return 1;
}

static void exercise(const target *t) {
    fill_outputs(t);
    const int64_t before = sdpa_alloc_count();
    const sdpa_status clean = t->call(t->ctx);
    const int64_t n = sdpa_alloc_count() - before;
    if (!CHECK(clean == SDPA_OK && n >= 1, "%s (%s): clean call %d, %lld allocations", t->name,
               sdpa_isa_name(th_isa), clean, (long long)n))
        return;
    int bad = 0;
    for (int64_t k = 1; k <= n; k++) {
        fill_outputs(t);
        sdpa_alloc_fail_at(k);
        const sdpa_status st = t->call(t->ctx);
        sdpa_alloc_fail_at(0);
        if (st != SDPA_ERR_OUT_OF_MEMORY || !outputs_untouched(t)) {
            CHECK(0, "%s (%s): allocation %lld of %lld failing gave %d (%s), outputs %s",
                  t->name, sdpa_isa_name(th_isa), (long long)k, (long long)n, st,
                  sdpa_strerror(st), outputs_untouched(t) ? "untouched" : "WRITTEN");
            bad = 1;
        }
    }
    if (!bad)
        CHECK(1, "%s", t->name);
    fill_outputs(t);
    CHECK(t->call(t->ctx) == SDPA_OK, "%s (%s): a call after the failures", t->name,
          sdpa_isa_name(th_isa));
}

/* ---- attention: forward, reference, weights ------------------------------------- */

typedef struct attn_ctx {
    sc_tensors t;
    float *w;
    int which; /* 0 forward, 1 reference, 2 weights */
} attn_ctx;

static sdpa_status attn_call(void *p) {
    attn_ctx *a = p;
    sc_tensors *t = &a->t;
    switch (a->which) {
    case 0: return sdpa_forward(&t->desc, &t->q, &t->k, &t->v, &t->o, t->lse);
    case 1: return sdpa_reference(&t->desc, &t->q, &t->k, &t->v, &t->o, t->lse);
    default: return sdpa_attention_weights(&t->desc, &t->q, &t->k, t->lse, a->w);
    }
}

/* A plan driven to the end on this thread (its allocations all happen in create). */
static sdpa_status plan_call(void *p) {
    attn_ctx *a = p;
    sc_tensors *t = &a->t;
    sdpa_plan *pl;
    sdpa_status st = sdpa_plan_create(&t->desc, &t->q, &t->k, &t->v, &t->o, t->lse, &pl);
    if (st != SDPA_OK)
        return st;
    void *scr = aligned_alloc(64, (sdpa_plan_scratch_size(pl) + 63) / 64 * 64);
    for (int64_t u = 0; u < sdpa_plan_units(pl) && st == SDPA_OK; u++)
        st = sdpa_plan_run(pl, u, scr);
    for (int64_t f = 0; f < sdpa_plan_finish_units(pl) && st == SDPA_OK; f++)
        st = sdpa_plan_finish(pl, f, scr);
    free(scr);
    sdpa_plan_destroy(pl);
    return st;
}

/* sdpa_merge of two parts (the per-thread scratch is its allocation). */
typedef struct merge_ctx {
    sdpa_merge_desc d;
    sdpa_tensor parts[2], o;
    const float *lses[2];
    float *lse;
} merge_ctx;

static sdpa_status merge_call(void *p) {
    merge_ctx *m = p;
    return sdpa_merge(&m->d, m->parts, m->lses, &m->o, m->lse);
}

static void merge_target(void) {
    enum { R = 700, D = 64 };
    uint64_t rng = 5;
    float *a = malloc(R * D * sizeof(float)), *b = malloc(R * D * sizeof(float));
    float *la = malloc(R * sizeof(float)), *lb = malloc(R * sizeof(float));
    float *o = malloc(R * D * sizeof(float)), *lo = malloc(R * sizeof(float));
    for (int i = 0; i < R * D; i++)
        a[i] = sc_rand_float(&rng), b[i] = sc_rand_float(&rng);
    for (int i = 0; i < R; i++)
        la[i] = sc_rand_float(&rng), lb[i] = sc_rand_float(&rng);
    merge_ctx m = {{.batch = 1, .heads = 1, .len = R, .dim = D, .parts = 2, .num_threads = 2},
                   {sdpa_tensor_bhtd(a, SDPA_F32, 1, R, D), sdpa_tensor_bhtd(b, SDPA_F32, 1, R, D)},
                   sdpa_tensor_bhtd(o, SDPA_F32, 1, R, D), {la, lb}, lo};
    target t = {"sdpa_merge", merge_call, &m, {o, lo}, {R * D * sizeof(float), R * sizeof(float)}};
    exercise(&t);
    free(a), free(b), free(la), free(lb), free(o), free(lo);
}

static void attention(void) {
    static const struct {
        const char *name;
        sc_case c;
        int no_weights; /* decode's long rows of weights: the other cases cover weights */
    } cases[] = {
        {"forward serial", {.B = 1, .Hq = 2, .Hkv = 2, .Tq = 40, .Tkv = 50, .Dk = 16, .Dv = 8}, 0},
        {"forward threaded", {.B = 2, .Hq = 4, .Hkv = 2, .Tq = 300, .Tkv = 300, .Dk = 64,
                              .Dv = 64, .causal = 1, .threads = 2}, 0},
        {"forward split-KV decode", {.B = 1, .Hq = 8, .Hkv = 2, .Tq = 1, .Tkv = 5000, .Dk = 32,
                                     .Dv = 32, .threads = 2}, 1},
        {"forward varlen + mask", {.B = 3, .Hq = 2, .Hkv = 1, .Tq = 20, .Tkv = 40, .Dk = 8,
                                   .Dv = 8, .lens = SC_LENS_VARLEN, .mask = SDPA_MASK_BOOL,
                                   .mask_hidden = 0.3f, .sinks = 1}, 0},
        /* KV caches: the block gather and the dequantized blocks take scratch of their own */
        {"forward quantized e5m2 per tensor", {.B = 1, .Hq = 2, .Hkv = 1, .Tq = 30, .Tkv = 70,
                                               .Dk = 16, .Dv = 16,
                                               .dt = {0, SDPA_FP8_E5M2, SDPA_FP8_E5M2, 0},
                                               .qscale = SC_QS_TENSOR}, 0},
        {"forward paged e4m3 / int4 threaded", {.B = 2, .Hq = 4, .Hkv = 2, .Tq = 100,
                                                .Tkv = 200, .Dk = 64, .Dv = 64, .causal = 1,
                                                .threads = 2, .page = 7, .qgroup = 32,
                                                .dt = {0, SDPA_FP8_E4M3, SDPA_I4, 0}}, 0},
        /* 1100 keys: two split-KV chunks (src/plan.c, from 2 x 512 keys) */
        {"forward paged int8 split-KV decode", {.B = 1, .Hq = 8, .Hkv = 2, .Tq = 1, .Tkv = 1100,
                                                .Dk = 32, .Dv = 32, .threads = 2, .page = 16,
                                                .dt = {0, SDPA_I8, SDPA_I8, 0}}, 1},
    };
    for (int i = 0; i < N(cases); i++)
        for (int which = 0; which < 4; which++) {
            if (which == 2 && cases[i].no_weights)
                continue;
            attn_ctx a = {.which = which};
            sc_case c = cases[i].c;
            c.seed = 70 + (uint64_t)i;
            th_tensors_make(&a.t, &c);
            const size_t nw = (size_t)(a.t.VB * c.Hq * a.t.desc.len_q * a.t.desc.len_kv);
            char name[96];
            static const char *entry[] = {"sdpa_forward", "sdpa_reference",
                                          "sdpa_attention_weights", "sdpa_plan_create"};
            snprintf(name, sizeof name, "%s: %s", cases[i].name, entry[which]);
            target t = {name, which == 3 ? plan_call : attn_call, &a, {0}, {0}};
            if (which == 2) {
                /* the weights read an lse: compute it first */
                sdpa_forward(&a.t.desc, &a.t.q, &a.t.k, &a.t.v, &a.t.o, a.t.lse);
                a.w = malloc(nw * sizeof(float));
                t.out[0] = a.w, t.bytes[0] = nw * sizeof(float);
            } else {
                t.out[0] = a.t.bufs[3], t.bytes[0] = a.t.elems[3] * (a.t.o.dtype ? 2 : 4);
                t.out[1] = a.t.lse, t.bytes[1] = a.t.elems[4] * sizeof(float);
            }
            exercise(&t);
            free(a.w);
            sc_tensors_free(&a.t);
        }
}

/* ---- sdpa_linear and the layer ------------------------------------------------------ */

typedef struct linear_ctx {
    sdpa_linear_desc d;
    const float *x;
    float *y;
} linear_ctx;

static sdpa_status linear_call(void *p) {
    linear_ctx *l = p;
    return sdpa_linear(&l->d, l->x, l->y);
}

typedef struct mha_ctx {
    sdpa_mha_desc d;
    const float *x;
    float *y, *w;
    void *ws;
} mha_ctx;

static sdpa_status mha_call(void *p) {
    mha_ctx *m = p;
    return sdpa_mha_forward(&m->d, m->x, NULL, m->y, m->w, m->ws);
}

static float *rand_buf(size_t n, uint64_t *rng) {
    float *a = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        a[i] = sc_rand_float(rng);
    return a;
}

static void layer(void) {
    uint64_t rng = 77;
    for (int big = 0; big < 2; big++) { /* serial, and past the threading cut-off */
        const int64_t M = big ? 256 : 9, K = big ? 128 : 7, Nf = big ? 192 : 5;
        linear_ctx l = {{.rows = M, .in_features = K, .out_features = Nf, .num_threads = 2,
                         .isa = th_isa}, NULL, NULL};
        float *x = rand_buf((size_t)(M * K), &rng), *w = rand_buf((size_t)(Nf * K), &rng);
        float *b = rand_buf((size_t)Nf, &rng);
        l.d.weight = w, l.d.bias = b, l.x = x;
        l.y = malloc((size_t)(M * Nf) * sizeof(float));
        target t = {big ? "sdpa_linear threaded" : "sdpa_linear serial", linear_call, &l,
                    {l.y}, {(size_t)(M * Nf) * sizeof(float)}};
        exercise(&t);
        free(x), free(w), free(b), free(l.y);
    }
    enum { B = 2, T = 12, DIN = 16, HQ = 4, HKV = 2, DH = 8, DOUT = 10 };
    float *wq = rand_buf(HQ * DH * DIN, &rng), *wk = rand_buf(HKV * DH * DIN, &rng);
    float *wv = rand_buf(HKV * DH * DIN, &rng), *wo = rand_buf(DOUT * HQ * DH, &rng);
    float *x = rand_buf(B * T * DIN, &rng);
    for (int variant = 0; variant < 3; variant++) {
        mha_ctx m = {{.batch = B, .len_q = T, .d_in = DIN, .heads_q = HQ, .heads_kv = HKV,
                      .head_dim = DH, .d_out = DOUT, .wq = {wq, NULL}, .wk = {wk, NULL},
                      .wv = {wv, NULL}, .wo = {wo, NULL}},
                     x, NULL, NULL, NULL};
        m.d.attn.causal = 1;
        m.d.attn.isa = th_isa;
        m.y = malloc(B * T * DOUT * sizeof(float));
        if (variant >= 1) /* with the attention weights as a second output */
            m.w = malloc(B * HQ * T * T * sizeof(float));
        if (variant == 2) /* the caller's workspace: only the steps' own scratch allocates */
            m.ws = aligned_alloc(64, (sdpa_mha_workspace_size(&m.d) + 63) / 64 * 64);
        static const char *names[] = {"sdpa_mha_forward", "sdpa_mha_forward + weights",
                                      "sdpa_mha_forward + weights, caller workspace"};
        target t = {names[variant], mha_call, &m, {m.y, m.w},
                    {B * T * DOUT * sizeof(float), m.w ? B * HQ * T * T * sizeof(float) : 0}};
        exercise(&t);
        free(m.y), free(m.w), free(m.ws);
    }
    free(wq), free(wk), free(wv), free(wo), free(x);
}

/* ---- sdpa_kv_write ----------------------------------------------------------------- */

typedef struct kvw_ctx {
    sdpa_kv_write_desc d;
    sdpa_tensor src, dst;
} kvw_ctx;

static sdpa_status kvw_call(void *p) {
    kvw_ctx *k = p;
    return sdpa_kv_write(&k->d, &k->src, &k->dst);
}

/* Per-token int8 with computed scales into a paged pool (pages in reverse order): the
 * cache and its scales are the outputs. Serial, and past the writer's threading cut-off
 * (2^18 elements); and a plain f16 cache, whose write is a copy. */
static void kv_write(void) {
    for (int variant = 0; variant < 3; variant++) {
        const int big = variant == 1, quant = variant < 2;
        const int64_t B = 2, H = big ? 4 : 2, L = big ? 256 : 5, D = big ? 128 : 8, P = 16;
        const int64_t per = (L + P - 1) / P, NP = B * per + 1;
        uint64_t rng = 91 + (uint64_t)variant;
        float *src = malloc((size_t)(B * H * L * D) * sizeof(float));
        for (int64_t i = 0; i < B * H * L * D; i++)
            src[i] = sc_rand_float(&rng);
        int32_t *table = malloc((size_t)(B * per) * sizeof(int32_t));
        for (int64_t i = 0; i < B * per; i++)
            table[i] = (int32_t)(NP - 1 - i);
        const size_t es = quant ? 1 : 2;
        const size_t cbytes = (size_t)(NP * H * P * D) * es;
        const size_t sbytes = (size_t)(NP * H * P) * sizeof(float);
        void *cache = malloc(cbytes), *scales = quant ? malloc(sbytes) : NULL;
        kvw_ctx k = {{.batch = B, .heads = H, .len = L, .dim = D, .len_kv = L,
                      .pages = {table, per, P, NP}, .compute_scales = quant, .num_threads = 2},
                     sdpa_tensor_bhtd(src, SDPA_F32, H, L, D),
                     {cache, quant ? SDPA_I8 : SDPA_F16, H * P * D, P * D, D}};
        if (quant)
            k.d.scales = (sdpa_scales){.data = scales, .dtype = SDPA_F32, .stride_b = H * P,
                                       .stride_h = P, .stride_t = 1};
        static const char *names[] = {"sdpa_kv_write int8 serial", "sdpa_kv_write int8 threaded",
                                      "sdpa_kv_write f16"};
        target t = {names[variant], kvw_call, &k, {cache, scales}, {cbytes, quant ? sbytes : 0}};
        exercise(&t);
        free(src), free(table), free(cache), free(scales);
    }
}

void suite_alloc(void) {
    attention();
    if (th_isa == sdpa_get_isa() || th_isa == SDPA_ISA_SCALAR)
        kv_write(); /* no kernel table involved: once or twice per run */
    layer();
    merge_target();
}
