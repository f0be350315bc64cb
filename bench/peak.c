/*
 * peak.c - runs the per-ISA peak loops and streaming-read loops (peak_<isa>.c) on 1..N
 * threads and keeps the best try (see peak.h). Portable C, compiled with no -m flags: it
 * only asks the library's ISA registry whether a loop may run and times it; the loops
 * themselves live in files built with their ISA's flags.
 *
 * Threads are plain pthreads, not OpenMP, so the figure does not depend on how the
 * benchmark was built (OPENMP=0 included) and each thread runs exactly one copy.
 */
#include "peak.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

/* The Makefile defines SB_PEAK_<ISA> for each peak_<isa>.c it builds (the ISAs of the
 * target architecture). */
static const struct {
    sdpa_isa isa;
    sb_peak_loop loop;
    sb_read_loop read;
    const char *what;
} loops[] = {
    {SDPA_ISA_SCALAR, sb_peak_loop_scalar, sb_read_loop_scalar,
     "portable C, 4-lane vectors, no -m flags (SSE2 mul+add on x86-64)"},
#if defined(SB_PEAK_AVX2)
    {SDPA_ISA_AVX2, sb_peak_loop_avx2, sb_read_loop_avx2, "AVX2 FMA, 12 chains x 8 lanes"},
#endif
#if defined(SB_PEAK_AVX512)
    {SDPA_ISA_AVX512, sb_peak_loop_avx512, sb_read_loop_avx512,
     "AVX-512 FMA, 16 chains x 16 lanes"},
#endif
#if defined(SB_PEAK_NEON)
    {SDPA_ISA_NEON, sb_peak_loop_neon, sb_read_loop_neon, "NEON FMLA, 16 chains x 4 lanes"},
#endif
/* the bf16 tables: their own product instruction, their base's streaming read */
#if defined(SB_PEAK_AVX512BF16)
    {SDPA_ISA_AVX512BF16, sb_peak_loop_avx512bf16, sb_read_loop_avx512,
     "AVX512_BF16 vdpbf16ps, 16 chains x 16 lanes x 2 products"},
#endif
#if defined(SB_PEAK_AMX)
    {SDPA_ISA_AMX, sb_peak_loop_amx, sb_read_loop_avx512,
     "AMX TDPBF16PS, 4 accumulator tiles of 16 x 16, K = 32"},
#endif
#if defined(SB_PEAK_NEONBF16)
    {SDPA_ISA_NEONBF16, sb_peak_loop_neonbf16, sb_read_loop_neon,
     "BF16 BFMMLA, 16 chains of 2 x 2 x 4"},
#endif
};
enum { NLOOPS = (int)(sizeof loops / sizeof loops[0]) };

/* A loop runs where the library's registry says its ISA's table does: the -m flags of
 * peak_<isa>.c are the table's (the Makefile's ISAFLAGS_<isa>). */
static int find(sdpa_isa isa) {
    for (int i = 0; i < NLOOPS; i++)
        if (loops[i].isa == isa)
            return sdpa_isa_supported(isa) ? i : -1;
    return -1;
}

const char *sb_peak_what(sdpa_isa isa) {
    const int i = find(isa);
    return i < 0 ? NULL : loops[i].what;
}

/* One thread's share of a try: the FMA loop (iters rounds), or with read set, the read
 * loop over n floats from p, or, with order set too, over the chunks p + order[c] n of
 * n floats each, for c in [0, chunks). */
typedef struct worker {
    sb_peak_loop loop;
    int64_t iters;
    sb_read_loop read;
    const float *p;
    int64_t n;
    const uint32_t *order;
    int64_t chunks;
    double done, t0, t1; /* flops or bytes */
    float sink;
} worker;

static double read_chunks(const worker *w, float *sink) {
    double done = 0.0;
    float sum = 0.0f;
    for (int64_t c = 0; c < w->chunks; c++) {
        float s;
        done += w->read(w->p + (int64_t)w->order[c] * w->n, w->n, &s);
        sum += s;
    }
    *sink = sum;
    return done;
}

static void *work(void *arg) {
    worker *w = arg;
    w->t0 = sb_now();
    w->done = w->order  ? read_chunks(w, &w->sink)
              : w->read ? w->read(w->p, w->n, &w->sink)
                        : w->loop(w->iters, &w->sink);
    w->t1 = sb_now();
    return NULL;
}

enum { MAX_THREADS = 1024 }; /* a static bound on the workers; far above any core count here */
static worker workers[MAX_THREADS];

/* Giga-units (flops or bytes) per second of one try of workers[0..threads): the time runs
 * from the first thread's start to the last one's finish, so the few microseconds between
 * thread starts only make a try look slower. Returns 0 if a thread cannot be created. */
static double try_once(int threads) {
    worker *w = workers;
    pthread_t tid[MAX_THREADS];
    int made = 1;
    while (made < threads && pthread_create(&tid[made], NULL, work, &w[made]) == 0)
        made++;
    work(&w[0]);
    for (int t = 1; t < made; t++)
        pthread_join(tid[t], NULL);
    if (made < threads)
        return 0.0;
    double t0 = w[0].t0, t1 = w[0].t1, done = 0.0;
    for (int t = 0; t < threads; t++) {
        t0 = w[t].t0 < t0 ? w[t].t0 : t0;
        t1 = w[t].t1 > t1 ? w[t].t1 : t1;
        done += w[t].done;
    }
    return t1 > t0 ? done / (t1 - t0) * 1e-9 : 0.0;
}

/* Each try lasts about TRY_SECONDS; the best of TRIES is kept. Short tries, many of
 * them: on a shared machine a short try is likelier to catch the cores idle, and 0.3 s
 * per ISA and thread count keeps the set-up of the suite short. */
#define TRY_SECONDS 0.03
#define TRIES 10

static double best_of_tries(sb_peak_loop loop, int threads) {
    if (threads < 1 || threads > MAX_THREADS)
        return 0.0;
    /* Calibrate on one thread: iterations for TRY_SECONDS at the measured rate. */
    float sink;
    int64_t iters = 1 << 16;
    for (;;) {
        const double t0 = sb_now();
        loop(iters, &sink);
        const double dt = sb_now() - t0;
        if (dt > TRY_SECONDS / 10) {
            iters = (int64_t)((double)iters * TRY_SECONDS / dt) + 1;
            break;
        }
        iters *= 4;
    }
    double best = 0.0;
    for (int t = 0; t < TRIES; t++) {
        for (int k = 0; k < threads; k++)
            workers[k] = (worker){.loop = loop, .iters = iters};
        const double g = try_once(threads);
        best = g > best ? g : best;
    }
    return best;
}

double sb_peak_gflops(sdpa_isa isa, int threads) {
    const int i = find(isa);
    if (i < 0)
        return 0.0;
    return best_of_tries(loops[i].loop, threads);
}

/* Passes over the buffer per measurement, the best kept as for the FMA peak: 3 GiB read
 * per ISA and thread count, a fraction of a second at DRAM speeds (docs/PERFORMANCE.md,
 * "Bench and tools measurements"). */
#define READ_PASSES 12

static float *dram_buf;
static uint32_t *paged_order; /* sb_dram_read_paged_gbps' chunks, shuffled */

/* The buffer, allocated and written on first use; NULL if it cannot be. */
static float *dram_buffer(void) {
    if (!dram_buf) {
        /* on huge pages where the OS offers them, as the suite's cases are (shim.h) */
        dram_buf = sc_alloc((size_t)SB_DRAM_BUFFER_BYTES, SC_GUARD_HUGE);
        if (!dram_buf)
            return NULL;
        /* Written once, so every page is mapped (and not the shared zero page) before
         * the first timed pass. */
        memset(dram_buf, 0, (size_t)SB_DRAM_BUFFER_BYTES);
    }
    return dram_buf;
}

double sb_dram_read_gbps(sdpa_isa isa, int threads) {
    const int i = find(isa);
    if (i < 0 || threads < 1 || threads > MAX_THREADS || !dram_buffer())
        return 0.0;
    /* Each thread reads a contiguous share, a multiple of 64 floats (the loops' step). */
    const int64_t floats = SB_DRAM_BUFFER_BYTES / (int64_t)sizeof(float);
    const int64_t share = floats / threads / 64 * 64;
    double best = 0.0;
    for (int pass = 0; pass < READ_PASSES; pass++) {
        for (int k = 0; k < threads; k++)
            workers[k] = (worker){.read = loops[i].read, .p = dram_buf + k * share, .n = share};
        const double g = try_once(threads);
        best = g > best ? g : best;
    }
    return best;
}

static int64_t paged_chunk; /* the chunk size paged_order is for */

double sb_dram_read_paged_gbps(sdpa_isa isa, int threads, int64_t chunk_bytes) {
    const int i = find(isa);
    if (i < 0 || threads < 1 || threads > MAX_THREADS || chunk_bytes < 64 ||
        chunk_bytes > SB_DRAM_BUFFER_BYTES || (chunk_bytes & (chunk_bytes - 1)) ||
        !dram_buffer())
        return 0.0;
    const int64_t chunks = SB_DRAM_BUFFER_BYTES / chunk_bytes;
    if (paged_chunk != chunk_bytes) {
        free(paged_order);
        paged_chunk = 0;
        paged_order = malloc((size_t)chunks * sizeof(uint32_t));
        if (!paged_order)
            return 0.0;
        uint64_t rng = 0x9e3779b97f4a7c15u; /* any fixed seed: the same order every run */
        for (int64_t c = 0; c < chunks; c++)
            paged_order[c] = (uint32_t)c;
        for (int64_t c = chunks - 1; c > 0; c--) { /* Fisher-Yates, xorshift64 */
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            const int64_t o = (int64_t)(rng % (uint64_t)(c + 1));
            const uint32_t x = paged_order[c];
            paged_order[c] = paged_order[o];
            paged_order[o] = x;
        }
        paged_chunk = chunk_bytes;
    }
    const int64_t share = chunks / threads;
    double best = 0.0;
    for (int pass = 0; pass < READ_PASSES; pass++) {
        for (int k = 0; k < threads; k++)
            workers[k] = (worker){.read = loops[i].read, .p = dram_buf,
                                  .n = chunk_bytes / (int64_t)sizeof(float),
                                  .order = paged_order + k * share, .chunks = share};
        const double g = try_once(threads);
        best = g > best ? g : best;
    }
    return best;
}

void sb_dram_release(void) {
    sc_free(dram_buf);
    dram_buf = NULL;
    free(paged_order);
    paged_order = NULL;
    paged_chunk = 0;
}
