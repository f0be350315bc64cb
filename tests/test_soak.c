/*
 * test_soak.c - concurrency soak: many host threads (pthreads) call sdpa_forward at once
 * on different shapes and features (paged and quantized KV caches among them), each call
 * forcing its ISA through desc.isa and running its own OpenMP team inside, while another
 * thread flips the process-wide ISA (sdpa_set_isa) and one host thread makes its calls
 * from inside an OpenMP parallel region. Every result must be bit-identical to the same
 * call made alone on one thread before the soak; calls made invalid on purpose must fail
 * and leave the outputs as they were; the reference runs concurrently too, and so does
 * sdpa_kv_write (each call into a worker's own cache, whose bytes must be those of the
 * lone write).
 *
 * Bounded in time: SDPA_SOAK_SECONDS (default 1.5, 0.5 with --quick) of soak after the
 * single-threaded runs; CI runs it longer under ThreadSanitizer (make tsan). It is not a
 * benchmark and says nothing about speed.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "harness.h"
#include "suites.h"

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Host threads besides the ISA flipper: enough to oversubscribe 2-64 cores with their
 * OpenMP teams on top. */
#define SOAK_WORKERS 6

typedef struct soak_cfg {
    sc_case c;
    int isa;              /* desc.isa of the calls; 0: the process-wide ISA, flipped */
    sc_tensors t;         /* inputs, and the output views the workers copy */
    size_t obytes, lbytes;
    unsigned char *pristine_o, *pristine_l; /* outputs before any call (the fill) */
    unsigned char *want_o[SDPA_ISA_COUNT_], *want_l[SDPA_ISA_COUNT_]; /* by ISA */
    unsigned char *ref_o, *ref_l; /* the reference's outputs */
} soak_cfg;

static soak_cfg cfgs[12];
static int ncfg;
static sdpa_isa usable_isas[SDPA_ISA_COUNT_];
static int nusable;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t dt_bytes(sdpa_dtype t) { return t == SDPA_F32 ? 4 : 2; }

/* One call of cfg into the caller's output buffers. */
static sdpa_status call(const soak_cfg *s, int isa, int threads, int bad, int ref, void *o,
                        float *lse, sdpa_stats *stats) {
    sdpa_desc d = s->t.desc;
    d.isa = isa;
    d.num_threads = threads;
    d.stats = stats;
    if (bad && d.pages.block_table) /* a pool of no pages */
        d.pages.num_pages = 0;
    else if (bad) /* heads_q not a multiple of heads_kv */
        d.heads_kv = d.heads_q + 1;
    sdpa_tensor ov = s->t.o;
    ov.data = o;
    return ref ? sdpa_reference(&d, &s->t.q, &s->t.k, &s->t.v, &ov, lse)
               : sdpa_forward(&d, &s->t.q, &s->t.k, &s->t.v, &ov, lse);
}

static unsigned char *dup(const void *p, size_t n) {
    unsigned char *c = malloc(n);
    memcpy(c, p, n);
    return c;
}

/* sdpa_kv_write in the soak: per-token int8 with computed scales into a paged pool,
 * 2^18 elements, enough for its OpenMP team; every call writes into fresh zeroed memory
 * of its own and must give the bytes of the lone single-threaded write. */
enum { WB = 2, WH = 4, WLEN = 256, WD = 128, WPAGE = 16, WPER = WLEN / WPAGE, WNP = WB * WPER + 3 };

static struct {
    float *src;
    int32_t table[WB * WPER];
    size_t cbytes, sbytes;
    unsigned char *want_c, *want_s; /* the lone write's cache and scales */
} wr;

/* One write into cache and scales; bad: a capacity below the rows written. */
static sdpa_status write_cache(int threads, int bad, void *cache, void *scales) {
    const sdpa_kv_write_desc d = {
        .batch = WB, .heads = WH, .len = WLEN, .dim = WD, .len_kv = bad ? WLEN - 1 : WLEN,
        .pages = {wr.table, WPER, WPAGE, WNP},
        .scales = {.data = scales, .dtype = SDPA_F32, .stride_b = WH * WPAGE,
                   .stride_h = WPAGE, .stride_t = 1},
        .compute_scales = 1, .num_threads = threads};
    const sdpa_tensor src = sdpa_tensor_bhtd(wr.src, SDPA_F32, WH, WLEN, WD);
    const sdpa_tensor dst = {cache, SDPA_I8, WH * WPAGE * WD, WPAGE * WD, WD};
    return sdpa_kv_write(&d, &src, &dst);
}

static void setup_writer(void) {
    uint64_t rng = 0x3717e;
    wr.src = malloc(sizeof(float) * WB * WH * WLEN * WD);
    for (int i = 0; i < WB * WH * WLEN * WD; i++)
        wr.src[i] = sc_rand_float(&rng);
    for (int i = 0; i < WB * WPER; i++) /* 11 is prime to WNP: distinct pages, shuffled */
        wr.table[i] = (i * 11 + 3) % WNP;
    wr.cbytes = (size_t)WNP * WH * WPAGE * WD;
    wr.sbytes = (size_t)WNP * WH * WPAGE * sizeof(float);
    wr.want_c = calloc(wr.cbytes, 1);
    wr.want_s = calloc(wr.sbytes, 1);
    const sdpa_status st = write_cache(1, 0, wr.want_c, wr.want_s);
    CHECK(st == SDPA_OK, "soak: the single-threaded sdpa_kv_write failed: %s", sdpa_strerror(st));
}

static void setup(void) {
    const sc_case cases[] = {
        {.B = 2, .Hq = 4, .Hkv = 2, .Tq = 200, .Tkv = 200, .Dk = 64, .Dv = 48, .causal = 1,
         .threads = 2},
        {.B = 1, .Hq = 8, .Hkv = 2, .Tq = 1, .Tkv = 3000, .Dk = 32, .Dv = 32, .causal = 1,
         .threads = 3, .sinks = 1},
        {.B = 3, .Hq = 2, .Hkv = 1, .Tq = 70, .Tkv = 130, .Dk = 24, .Dv = 40,
         .lens = SC_LENS_PADDED, .mask = SDPA_MASK_BOOL, .mask_hidden = 0.3f},
        {.B = 3, .Hq = 2, .Hkv = 2, .Tq = 90, .Tkv = 150, .Dk = 16, .Dv = 16, .causal = 1,
         .lens = SC_LENS_VARLEN, .window = 1, .wl = 40, .alibi = 1, .threads = 2},
        {.B = 1, .Hq = 3, .Hkv = 3, .Tq = 129, .Tkv = 257, .Dk = 40, .Dv = 40, .threads = 1,
         .dt = {SDPA_F16, SDPA_BF16, SDPA_F16, SDPA_BF16}, .softcap = 20.0f,
         .layout = SC_PADDED},
        {.B = 2, .Hq = 2, .Hkv = 1, .Tq = 60, .Tkv = 100, .Dk = 32, .Dv = 32, .dropout = 0.2f,
         .mask = SDPA_MASK_ADDITIVE, .mask_dt = SDPA_F16, .mask_bcast = SC_BCAST_B},
        {.B = 1, .Hq = 8, .Hkv = 1, .Tq = 5, .Tkv = 2000, .Dk = 32, .Dv = 32, .causal = 1,
         .window = 1, .wl = 900, .threads = 2, .layout = SC_BTHD},
        /* decode over a tokens-major cache, every KV head in one item (plan.c, hgroup) */
        {.B = 2, .Hq = 8, .Hkv = 4, .Tq = 1, .Tkv = 1500, .Dk = 32, .Dv = 32, .threads = 2,
         .layout = SC_BTHD, .lens = SC_LENS_KV, .dt = {SDPA_F32, SDPA_F16, SDPA_F16, SDPA_F32}},
        {.B = 1, .Hq = 2, .Hkv = 2, .Tq = 6, .Tkv = 6, .Dk = 4, .Dv = 4, .causal = 1,
         .threads = 4},
        /* paged caches: int8 decode over pages of 16 with per-token scales and lengths;
         * fp8 K and int4 V in pages of 7, f16 group scales, chunked prefill */
        {.B = 2, .Hq = 8, .Hkv = 2, .Tq = 1, .Tkv = 700, .Dk = 64, .Dv = 64, .threads = 2,
         .lens = SC_LENS_KV, .page = 16, .dt = {SDPA_F32, SDPA_I8, SDPA_I8, SDPA_F32}},
        {.B = 1, .Hq = 4, .Hkv = 2, .Tq = 48, .Tkv = 160, .Dk = 32, .Dv = 32, .causal = 1,
         .threads = 3, .page = 7, .dt = {SDPA_BF16, SDPA_FP8_E4M3, SDPA_I4, SDPA_F16},
         .qgroup = 16, .qscale_dt = SDPA_F16},
        {.B = 1, .Hq = 4, .Hkv = 4, .Tq = 150, .Tkv = 150, .Dk = 32, .Dv = 32, .causal = 1,
         .threads = 2},
    };
    nusable = 0;
    for (int i = SDPA_ISA_SCALAR; i < SDPA_ISA_COUNT_; i++)
        if (sdpa_isa_supported((sdpa_isa)i))
            usable_isas[nusable++] = (sdpa_isa)i;
    setup_writer();
    _Static_assert(sizeof cases / sizeof cases[0] <= sizeof cfgs / sizeof cfgs[0],
                   "a soak configuration for every case");
    ncfg = N(cases);
    for (int k = 0; k < ncfg; k++) {
        soak_cfg *s = &cfgs[k];
        memset(s, 0, sizeof *s);
        s->c = cases[k];
        s->c.seed = 5000 + (uint64_t)k;
        /* the last one follows the process-wide ISA; the others cycle through the ISAs */
        s->isa = k == ncfg - 1 ? SDPA_ISA_AUTO : usable_isas[k % nusable];
        th_tensors_make(&s->t, &s->c);
        if (k == 0 || k == 4) /* the bf16 compute mode, on its tiles and the fp32 ones */
            s->t.desc.compute = SDPA_COMPUTE_BF16;
        s->obytes = s->t.elems[3] * dt_bytes(s->t.o.dtype);
        s->lbytes = s->t.elems[4] * sizeof(float);
        s->pristine_o = dup(s->t.o.data, s->obytes);
        s->pristine_l = dup(s->t.lse, s->lbytes);
        for (int u = 0; u < nusable; u++) {
            const sdpa_isa isa = usable_isas[u];
            if (s->isa != SDPA_ISA_AUTO && s->isa != (int)isa)
                continue;
            memcpy(s->t.o.data, s->pristine_o, s->obytes);
            memcpy(s->t.lse, s->pristine_l, s->lbytes);
            const sdpa_status st = call(s, isa, 1, 0, 0, s->t.o.data, s->t.lse, NULL);
            CHECK(st == SDPA_OK, "soak config %d (%s): the single-threaded call failed: %s", k,
                  sdpa_isa_name(isa), sdpa_strerror(st));
            s->want_o[isa] = dup(s->t.o.data, s->obytes);
            s->want_l[isa] = dup(s->t.lse, s->lbytes);
        }
        memcpy(s->t.o.data, s->pristine_o, s->obytes);
        memcpy(s->t.lse, s->pristine_l, s->lbytes);
        if (s->c.Tq * s->c.Tkv <= 50000) { /* the reference, where it is quick */
            call(s, 0, 1, 0, 1, s->t.o.data, s->t.lse, NULL);
            s->ref_o = dup(s->t.o.data, s->obytes);
            s->ref_l = dup(s->t.lse, s->lbytes);
        }
    }
}

static void teardown(void) {
    free(wr.src);
    free(wr.want_c);
    free(wr.want_s);
    for (int k = 0; k < ncfg; k++) {
        soak_cfg *s = &cfgs[k];
        for (int i = 0; i < SDPA_ISA_COUNT_; i++) {
            free(s->want_o[i]);
            free(s->want_l[i]);
        }
        free(s->pristine_o);
        free(s->pristine_l);
        free(s->ref_o);
        free(s->ref_l);
        sc_tensors_free(&s->t);
    }
}

typedef struct worker {
    int id;
    double deadline;
    long calls, failures;
    char first[256];
    pthread_t tid;
} worker;

static void note(worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(worker *w, const char *fmt, ...) {
    if (w->failures++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->first, sizeof w->first, fmt, ap);
        va_end(ap);
    }
}

static int all_zero(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* One sdpa_kv_write (an invalid one now and then), checked against the lone write. */
static void one_write(worker *w, uint64_t r) {
    static const int threads[] = {0, 1, 2, 3};
    const int nt = threads[(r >> 16) % 4], bad = (r >> 8) % 8 == 0;
    unsigned char *c = calloc(wr.cbytes, 1), *sc = calloc(wr.sbytes, 1);
    const sdpa_status st = write_cache(nt, bad, c, sc);
    w->calls++;
    if (bad && (st != SDPA_ERR_BAD_ARGUMENT || !all_zero(c, wr.cbytes) || !all_zero(sc, wr.sbytes)))
        note(w, "an invalid sdpa_kv_write returned %d or wrote the cache (threads %d)", st, nt);
    else if (!bad && (st != SDPA_OK || memcmp(c, wr.want_c, wr.cbytes) != 0 ||
                      memcmp(sc, wr.want_s, wr.sbytes) != 0))
        note(w, "sdpa_kv_write with %d threads: status %d, or bytes other than the lone "
             "write's", nt, st);
    free(c);
    free(sc);
}

/* One call chosen by the worker's stream, checked against its expected bits; one in ten
 * a cache write. */
static void one_call(worker *w, uint64_t *rng) {
    const uint64_t r = sc_rand_u64(rng);
    if ((r >> 40) % 10 == 0) {
        one_write(w, r);
        return;
    }
    const int k = (int)(r % (uint64_t)ncfg);
    const soak_cfg *s = &cfgs[k];
    const int bad = (r >> 8) % 8 == 0;             /* an invalid call now and then */
    const int ref = !bad && s->ref_o && (r >> 12) % 6 == 0;
    static const int threads[] = {0, 1, 2, 3};
    const int nt = threads[(r >> 16) % 4];
    unsigned char *o = dup(s->pristine_o, s->obytes);
    float *lse = (float *)(void *)dup(s->pristine_l, s->lbytes);
    sdpa_stats st;
    const sdpa_status status = call(s, s->isa, nt, bad, ref, o, lse, ref ? NULL : &st);
    w->calls++;
    if (bad) {
        const sdpa_status want = s->t.desc.pages.block_table ? SDPA_ERR_BAD_ARGUMENT
                                                             : SDPA_ERR_BAD_HEADS;
        if (status != want || memcmp(o, s->pristine_o, s->obytes) != 0 ||
            memcmp(lse, s->pristine_l, s->lbytes) != 0)
            note(w, "config %d: an invalid call returned %d or wrote an output (threads %d)", k,
                 status, nt);
    } else if (status != SDPA_OK) {
        note(w, "config %d: status %d with %d threads", k, status, nt);
    } else if (ref) {
        if (memcmp(o, s->ref_o, s->obytes) != 0 || memcmp(lse, s->ref_l, s->lbytes) != 0)
            note(w, "config %d: the reference differs from its lone run", k);
    } else {
        /* the ISA the call took: its own, or, following the flipped process-wide one,
         * whichever the stats name; its bits must be that ISA's lone run */
        const int isa = s->isa != SDPA_ISA_AUTO ? s->isa : (int)st.isa;
        const int known = isa > 0 && isa < SDPA_ISA_COUNT_ && s->want_o[isa];
        if (!known || (int)st.isa != isa || memcmp(o, s->want_o[isa], s->obytes) != 0 ||
            memcmp(lse, s->want_l[isa], s->lbytes) != 0)
            note(w, "config %d: %d threads (isa %d) differ from the lone single-threaded run",
                 k, nt, isa);
    }
    if (sdpa_get_isa() == SDPA_ISA_AUTO || !sdpa_isa_supported(sdpa_get_isa()))
        note(w, "sdpa_get_isa returned %d during the soak", (int)sdpa_get_isa());
    free(o);
    free(lse);
}

static void *work(void *arg) {
    worker *w = arg;
    uint64_t rng = 0x50a4 + (uint64_t)w->id * 7919;
#ifdef _OPENMP
    if (w->id == 0) {
        /* this host thread's calls come from inside an OpenMP parallel region: the
         * library must not nest a team unless asked (num_threads > 0 then nests under
         * OpenMP's own rules) and must give the same bits */
        long calls = 0, failures = 0;
        char first[256] = "";
#pragma omp parallel num_threads(2) reduction(+ : calls, failures)
        {
            worker sub = {.id = w->id, .deadline = w->deadline};
            uint64_t srng = rng + (uint64_t)omp_get_thread_num() * 104729;
            do /* at least one call each, however slow the host (valgrind) */
                one_call(&sub, &srng);
            while (now() < sub.deadline);
            calls += sub.calls;
            failures += sub.failures;
#pragma omp critical(soak_first)
            if (sub.failures && !first[0])
                memcpy(first, sub.first, sizeof first);
        }
        w->calls = calls;
        w->failures = failures;
        memcpy(w->first, first, sizeof first);
        return NULL;
    }
#endif
    do
        one_call(w, &rng);
    while (now() < w->deadline);
    return NULL;
}

typedef struct flipper {
    double deadline;
    long flips;
    pthread_t tid;
} flipper;

/* Flips the process-wide ISA among the usable ones while the workers run; calls with
 * desc.isa = 0 take whichever is current when they start and keep it. */
static void *flip(void *arg) {
    flipper *f = arg;
    const struct timespec pause = {0, 200000};
    while (now() < f->deadline) {
        sdpa_set_isa(usable_isas[f->flips % nusable]);
        f->flips++;
        nanosleep(&pause, NULL);
    }
    return NULL;
}

void suite_soak(void) {
    setup();
    const char *env = getenv("SDPA_SOAK_SECONDS");
    const double seconds = env ? atof(env) : th_quick ? 0.5 : 1.5;
    const double deadline = now() + seconds;
    worker w[SOAK_WORKERS];
    flipper f = {.deadline = deadline};
    for (int i = 0; i < SOAK_WORKERS; i++) {
        w[i] = (worker){.id = i, .deadline = deadline};
        pthread_create(&w[i].tid, NULL, work, &w[i]);
    }
    pthread_create(&f.tid, NULL, flip, &f);
    long calls = 0;
    for (int i = 0; i < SOAK_WORKERS; i++) {
        pthread_join(w[i].tid, NULL);
        calls += w[i].calls;
        CHECK(w[i].failures == 0, "soak worker %d: %ld of %ld calls wrong; first: %s", i,
              w[i].failures, w[i].calls, w[i].first);
    }
    pthread_join(f.tid, NULL);
    sdpa_set_isa(SDPA_ISA_AUTO);
    CHECK(calls >= SOAK_WORKERS, "the soak made only %ld calls", calls);
    if (th_verbose)
        printf("  soak: %ld calls on %d host threads, %ld ISA flips, %.1f s\n", calls,
               SOAK_WORKERS, f.flips, seconds);
    teardown();
}
