/*
 * sdpa-run - one attention configuration from command-line flags, every descriptor
 * feature included (16-bit storage, windows, softcap, ALiBi, sinks, key lengths, masks,
 * top-left causal): the ISA used, the median time, GFLOP/s and K/V GB/s; with --check
 * the largest errors against the reference; with --mem the peak extra memory of the
 * fused path and of the reference. This is how a user tries one configuration on their
 * own machine and how scripts measure (--json: one object on one line).
 *
 * It is plain C with no Google Benchmark dependency, so it builds wherever libsdpa does
 * (an aarch64 cross-build included). It is not the benchmark suite (`make bench` is:
 * repetitions of many cases, the FMA peak, a baseline); it shares the flop count, the
 * data and the check with it through bench/shim.c.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../bench/shim.h"
#include "sdpa.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: sdpa-run [options]\n"
            "  --shape NAME     start from a suite shape (flags below override it):\n"
            "                   ");
    for (int i = 0; i < sb_suite_len; i++)
        fprintf(f, "%s%s", i ? ", " : "", sb_suite[i].name);
    fprintf(f,
            "\n"
            "  --batch N        B, batch entries                        (default 1)\n"
            "  --heads N        Hq, query heads                         (default 8)\n"
            "  --kv-heads N     Hkv, key/value heads, divides Hq        (default Hq)\n"
            "  --len-q N        Tq, query rows                          (default 512)\n"
            "  --len-kv N       Tkv, key/value rows                     (default Tq)\n"
            "  --dim N          Dk, query/key head dim                  (default 64)\n"
            "  --dim-v N        Dv, value head dim                      (default Dk)\n"
            "  --causal         bottom-right causal mask                (default off)\n"
            "  --top-left       causal, top-left aligned (row i sees keys j <= i, PyTorch's\n"
            "                   is_causal); implies --causal\n"
            "  --dtype T        f32, f16 or bf16 storage of Q, K, V and O alike (default f32)\n"
            "  --window L,R     sliding window: row i sees keys d(i)-L .. d(i)+R (L, R >= 0),\n"
            "                   d(i) = i + Tkv - Tq (under --top-left: i)\n"
            "  --softcap C      logit soft-capping s = C tanh(s / C), C > 0\n"
            "  --alibi          ALiBi, the paper's slopes for Hq heads (sdpa_alibi_slopes)\n"
            "  --sinks          a sink logit per head: (h mod 4) - 1\n"
            "  --kv-lens N[,N]  valid keys per batch entry (<= Tkv): one per entry, or one\n"
            "                   for all\n"
            "  --mask KIND      bool or float: one [Tq, Tkv] mask broadcast over batch and\n"
            "                   heads (stride 0) hiding key j from row i for ~10%% of the\n"
            "                   (i, j) pairs, picked by a hash of (i, j); float is additive:\n"
            "                   -inf there, a bias in [-0.5, 0.5) elsewhere\n"
            "  --isa NAME       auto, scalar, avx2, avx512, neon        (default auto)\n"
            "  --threads N      thread cap, 0 = OpenMP's default        (default 0)\n"
            "  --repeat N       timed calls after one warm-up call      (default 5)\n"
            "  --check          compare with sdpa_reference (the whole output when the\n"
            "                   reference needs at most %.0f GFLOP, else the first, middle\n"
            "                   and last rows of two heads, those that are exact\n"
            "                   sub-problems); exit 1 if |o - r| > 1e-5 + 1e-4 |r| (16-bit\n"
            "                   output: + 2^-10 |r| f16, 2^-7 |r| bf16) anywhere it looked\n"
            "  --mem            peak extra memory of one fused call and of one reference\n"
            "                   call: heap bytes (exact) and resident KiB (coarse), each\n"
            "                   in a child process (Linux)\n"
            "  --json           one JSON object on one line instead of text\n"
            "  --help           this text\n"
            "Bad flags exit with status 2.\n",
            SB_FULL_CHECK_FLOPS * 1e-9);
}

static int bad_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints the complaint, then the usage on stderr; returns 2, the status of a bad flag. */
static int bad_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "sdpa-run: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    usage(stderr);
    return 2;
}

/* A positive integer flag value, or -1. */
static int64_t parse_count(const char *s, int64_t min) {
    char *end;
    errno = 0;
    const long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min)
        return -1;
    return v;
}

/* A comma-separated list of integers >= 0, at most max values; returns how many, or -1. */
static int parse_list(const char *s, int64_t *out, int max) {
    int n = 0;
    for (;;) {
        char *end;
        errno = 0;
        const long long v = strtoll(s, &end, 10);
        if (errno || end == s || v < 0 || n == max || (*end && *end != ','))
            return -1;
        out[n++] = v;
        if (!*end)
            return n;
        s = end + 1;
    }
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- --mem: peak extra memory of one call, measured two ways ---------------------
 *
 * heap: sdpa-run replaces malloc and friends (glibc documents this: "Replacing malloc")
 *   with thin wrappers around glibc's own allocator that keep a count of the bytes in
 *   use (malloc_usable_size) and its peak. The executable's definitions win for every
 *   caller, libsdpa and the OpenMP runtime included. Exact, but it sees only the heap.
 * resident: VmHWM after the call minus VmRSS before it (/proc/self/status), after
 *   resetting VmHWM. It sees everything (stacks, mmap) but counts 4 KiB pages, and the
 *   kernel batches its RSS counters per CPU, so it is only good to ~128 KiB.
 * Each path is measured in a forked child, after one small warm-up call down the same
 * path, so nothing the parent did and nothing a first call brings in is charged. */

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1 /* gcc: the sanitizer owns malloc */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define SANITIZED 1 /* clang: likewise */
#endif
#endif

#if defined(__GLIBC__) && !defined(SANITIZED)
#include <malloc.h>
#include <stdatomic.h>

/* glibc's allocator under its exported internal names (glibc manual, "Replacing
 * malloc"); every pointer below comes from it, so __libc_free frees any of them. */
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);
extern void __libc_free(void *p);

static _Atomic long long heap_now, heap_peak;

static void heap_add(void *p) {
    if (!p)
        return;
    const long long now = atomic_fetch_add(&heap_now, (long long)malloc_usable_size(p)) +
                          (long long)malloc_usable_size(p);
    long long peak = atomic_load(&heap_peak);
    while (now > peak && !atomic_compare_exchange_weak(&heap_peak, &peak, now))
        ;
}

static void heap_sub(void *p) {
    if (p)
        atomic_fetch_sub(&heap_now, (long long)malloc_usable_size(p));
}

void *malloc(size_t n) {
    void *p = __libc_malloc(n);
    heap_add(p);
    return p;
}

void *calloc(size_t n, size_t size) {
    void *p = __libc_calloc(n, size);
    heap_add(p);
    return p;
}

void *realloc(void *old, size_t n) {
    const size_t was = old ? malloc_usable_size(old) : 0;
    void *p = __libc_realloc(old, n);
    if (p || n == 0) { /* moved, resized or freed: the old block is gone */
        atomic_fetch_sub(&heap_now, (long long)was);
        heap_add(p);
    }
    return p;
}

void *aligned_alloc(size_t align, size_t n) {
    void *p = __libc_memalign(align, n);
    heap_add(p);
    return p;
}

void *memalign(size_t align, size_t n) {
    void *p = __libc_memalign(align, n);
    heap_add(p);
    return p;
}

int posix_memalign(void **out, size_t align, size_t n) {
    if (align < sizeof(void *) || (align & (align - 1)) != 0)
        return EINVAL;
    void *p = __libc_memalign(align, n);
    if (!p)
        return ENOMEM;
    heap_add(p);
    *out = p;
    return 0;
}

void free(void *p) {
    heap_sub(p);
    __libc_free(p);
}

/* Start a measurement: the peak restarts from what is in use now. */
static long long heap_mark(void) {
    const long long now = atomic_load(&heap_now);
    atomic_store(&heap_peak, now);
    return now;
}
static long long heap_peak_since(long long mark) { return atomic_load(&heap_peak) - mark; }
#define HEAP_COUNTED 1
#else
static long long heap_mark(void) { return 0; }
static long long heap_peak_since(long long mark) { return mark - 1; /* -1: not counted */ }
#define HEAP_COUNTED 0
#endif

/* A field of /proc/self/status in KiB ("VmRSS:", "VmHWM:"), or -1. */
static long status_kib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long v = -1;
    const size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0) {
            v = strtol(line + n, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

/* Writing 5 to clear_refs resets VmHWM to the current RSS (Linux >= 4.0,
 * Documentation/admin-guide/mm/soft-dirty.rst). */
static int reset_hwm(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f)
        return -1;
    const int ok = fputs("5", f) >= 0;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

enum { MEM_FUSED, MEM_REFERENCE };

typedef struct mem_job {
    const sb_problem *p;
    int what;          /* MEM_FUSED or MEM_REFERENCE */
    sdpa_isa isa;
    int threads;
    const sb_piece *piece; /* MEM_REFERENCE: run on this piece, NULL = whole problem */
} mem_job;

/* One small call down the same path before the measured one, so what any first call
 * brings in is not charged to it: the code and libm pages it executes (VmRSS counts
 * file-backed pages too) and, for the fused path, the OpenMP threads' stacks and the
 * runtime's state. The fused warm-up still runs in parallel: 256 x 256 keys at D = 64 on
 * as many heads as threads is ~17 MFLOP per head, above the library's ~4 MFLOP serial
 * cut-off (src/sdpa.c SERIAL_FLOPS_MAX). */
static int warm_up(const mem_job *job) {
    const int heads = job->threads > 0 ? job->threads : sb_nproc();
    const sb_shape s = {.name = "warm-up", .B = 1, .Hq = heads, .Hkv = heads, .Tq = 256,
                        .Tkv = 256, .Dk = 64, .Dv = 64};
    sb_problem w;
    if (sb_problem_init(&w, &s) != 0)
        return -1;
    const sdpa_status st = job->what == MEM_FUSED ? sb_run_fused(&w, job->isa, job->threads, NULL)
                                                  : sb_run_reference(&w);
    sb_problem_free(&w);
    return st == SDPA_OK ? 0 : -1;
}

typedef struct mem_use {
    long long heap_bytes; /* peak heap above what was in use before the call; -1: not
                             counted in this build */
    long rss_kib;         /* VmHWM after - VmRSS before */
    int ok;
} mem_use;

/* Runs the job in a forked child and returns what it measured. The parent must not
 * have used OpenMP yet: a forked child inherits no threads, and libgomp's pool does not
 * survive fork. */
static mem_use mem_in_child(const mem_job *job) {
    mem_use m = {-1, -1, 0};
    int fd[2];
    if (pipe(fd) != 0)
        return m;
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return m;
    }
    if (pid == 0) {
        close(fd[0]);
        const sb_problem *p = job->p;
        /* Write the output once: after fork its pages are shared with the parent, and the
         * call's first writes would copy them, which is not the call's memory. A piece's
         * fp32 output gets its own buffer, allocated and written before the measurement
         * for the same reason. */
        memset(p->o, 0, (size_t)(p->s.B * p->s.Hq * p->s.Tq * p->s.Dv) *
                            (size_t)sb_elem_size(p->s.dtype));
        float *piece_out = NULL;
        if (job->piece) {
            const size_t n = (size_t)(job->piece->rows * p->s.Dv) * sizeof(float);
            if ((piece_out = malloc(n)) != NULL)
                memset(piece_out, 0, n);
        }
        if ((!job->piece || piece_out) && warm_up(job) == 0 && reset_hwm() == 0) {
            const long rss0 = status_kib("VmRSS:");
            const long long mark = heap_mark();
            sdpa_status st;
            if (job->what == MEM_FUSED)
                st = sb_run_fused(p, job->isa, job->threads, NULL);
            else if (job->piece)
                st = sb_reference_piece(p, job->piece, piece_out);
            else
                st = sb_run_reference(p);
            m.heap_bytes = heap_peak_since(mark); /* before status_kib's own fopen */
            const long hwm = status_kib("VmHWM:");
            m.rss_kib = hwm - rss0;
            m.ok = st == SDPA_OK && rss0 >= 0 && hwm >= 0;
        }
        const ssize_t w = write(fd[1], &m, sizeof m);
        _exit(w == (ssize_t)sizeof m ? 0 : 1);
    }
    close(fd[1]);
    if (read(fd[0], &m, sizeof m) != (ssize_t)sizeof m)
        m.ok = 0;
    close(fd[0]);
    int status;
    waitpid(pid, &status, 0);
    return m;
}

/* ---- main ------------------------------------------------------------------------ */

enum { OPT_BATCH = 256, OPT_HEADS, OPT_KV_HEADS, OPT_LEN_Q, OPT_LEN_KV, OPT_DIM, OPT_DIM_V,
       OPT_CAUSAL, OPT_ISA, OPT_THREADS, OPT_REPEAT, OPT_CHECK, OPT_JSON, OPT_MEM, OPT_SHAPE,
       OPT_HELP, OPT_TOP_LEFT, OPT_DTYPE, OPT_WINDOW, OPT_SOFTCAP, OPT_ALIBI, OPT_SINKS,
       OPT_KV_LENS, OPT_MASK };

static const char *const dtype_names[] = {"f32", "f16", "bf16"};

int main(int argc, char **argv) {
    static const struct option opts[] = {
        {"batch", required_argument, NULL, OPT_BATCH},
        {"heads", required_argument, NULL, OPT_HEADS},
        {"kv-heads", required_argument, NULL, OPT_KV_HEADS},
        {"len-q", required_argument, NULL, OPT_LEN_Q},
        {"len-kv", required_argument, NULL, OPT_LEN_KV},
        {"dim", required_argument, NULL, OPT_DIM},
        {"dim-v", required_argument, NULL, OPT_DIM_V},
        {"causal", no_argument, NULL, OPT_CAUSAL},
        {"isa", required_argument, NULL, OPT_ISA},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"repeat", required_argument, NULL, OPT_REPEAT},
        {"check", no_argument, NULL, OPT_CHECK},
        {"json", no_argument, NULL, OPT_JSON},
        {"mem", no_argument, NULL, OPT_MEM},
        {"shape", required_argument, NULL, OPT_SHAPE},
        {"help", no_argument, NULL, OPT_HELP},
        {"top-left", no_argument, NULL, OPT_TOP_LEFT},
        {"dtype", required_argument, NULL, OPT_DTYPE},
        {"window", required_argument, NULL, OPT_WINDOW},
        {"softcap", required_argument, NULL, OPT_SOFTCAP},
        {"alibi", no_argument, NULL, OPT_ALIBI},
        {"sinks", no_argument, NULL, OPT_SINKS},
        {"kv-lens", required_argument, NULL, OPT_KV_LENS},
        {"mask", required_argument, NULL, OPT_MASK},
        {NULL, 0, NULL, 0},
    };
    /* -1: not given. Dimensions given as flags override --shape's, whatever the order. */
    int64_t dims[7] = {-1, -1, -1, -1, -1, -1, -1}; /* B Hq Hkv Tq Tkv Dk Dv */
    int causal = 0, top_left = 0, check = 0, json = 0, mem = 0;
    int64_t threads = 0, repeat = 5;
    sdpa_isa isa = SDPA_ISA_AUTO;
    const sb_shape *preset = NULL;
    /* Features: -1 / NULL / 0 when not given, so a preset's own stay. */
    int dtype = -1, alibi = 0, sinks = 0;
    int64_t window[2] = {-1, -1};
    double softcap = 0.0;
    sdpa_mask_kind mask = SDPA_MASK_NONE;
    const char *kv_lens_arg = NULL;

    opterr = 0; /* our own message, then the usage */
    int c;
    /* The leading ':' makes a missing value ':' rather than '?', for a clearer message. */
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case OPT_BATCH: case OPT_HEADS: case OPT_KV_HEADS: case OPT_LEN_Q: case OPT_LEN_KV:
        case OPT_DIM: case OPT_DIM_V:
            if ((dims[c - OPT_BATCH] = parse_count(optarg, 1)) < 0)
                return bad_usage("--%s needs a positive integer", opts[c - OPT_BATCH].name);
            break;
        case OPT_CAUSAL: causal = 1; break;
        case OPT_TOP_LEFT: top_left = 1; break;
        case OPT_CHECK: check = 1; break;
        case OPT_JSON: json = 1; break;
        case OPT_MEM: mem = 1; break;
        case OPT_ALIBI: alibi = 1; break;
        case OPT_SINKS: sinks = 1; break;
        case OPT_THREADS:
            if ((threads = parse_count(optarg, 0)) < 0 || threads > 1 << 20)
                return bad_usage("--threads needs an integer >= 0, got '%s'", optarg);
            break;
        case OPT_REPEAT:
            if ((repeat = parse_count(optarg, 1)) < 0 || repeat > 1 << 20)
                return bad_usage("--repeat needs an integer >= 1, got '%s'", optarg);
            break;
        case OPT_ISA: {
            int found = 0;
            for (int i = 0; i < SDPA_ISA_COUNT_; i++)
                if (strcmp(optarg, sdpa_isa_name((sdpa_isa)i)) == 0) {
                    isa = (sdpa_isa)i;
                    found = 1;
                }
            if (!found)
                return bad_usage("unknown --isa '%s' (auto, scalar, avx2, avx512, neon)", optarg);
            break;
        }
        case OPT_DTYPE:
            dtype = -1;
            for (int i = 0; i < 3; i++)
                if (strcmp(optarg, dtype_names[i]) == 0)
                    dtype = i; /* the index is the sdpa_dtype value */
            if (dtype < 0)
                return bad_usage("unknown --dtype '%s' (f32, f16, bf16)", optarg);
            break;
        case OPT_WINDOW:
            if (parse_list(optarg, window, 2) != 2 || window[0] > SDPA_MAX_DIM ||
                window[1] > SDPA_MAX_DIM)
                return bad_usage("--window needs L,R: two integers 0 .. 2^40, got '%s'", optarg);
            break;
        case OPT_SOFTCAP: {
            char *end;
            errno = 0;
            softcap = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(softcap > 0.0) || softcap > 3.4e38)
                return bad_usage("--softcap needs a finite number > 0, got '%s'", optarg);
            break;
        }
        case OPT_KV_LENS: kv_lens_arg = optarg; break;
        case OPT_MASK:
            if (strcmp(optarg, "bool") == 0)
                mask = SDPA_MASK_BOOL;
            else if (strcmp(optarg, "float") == 0)
                mask = SDPA_MASK_ADDITIVE;
            else
                return bad_usage("unknown --mask '%s' (bool, float)", optarg);
            break;
        case OPT_SHAPE:
            if (!(preset = sb_find_shape(optarg)))
                return bad_usage("unknown --shape '%s'", optarg);
            break;
        case OPT_HELP:
            usage(stdout);
            return 0;
        case ':':
            return bad_usage("%s needs a value", argv[optind - 1]);
        default:
            return bad_usage("bad option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return bad_usage("unexpected argument '%s'", argv[optind]);

    sb_shape s = preset ? *preset : (sb_shape){.name = "custom", .B = 1, .Hq = 8, .Tq = 512,
                                               .Dk = 64};
    int64_t *field[7] = {&s.B, &s.Hq, &s.Hkv, &s.Tq, &s.Tkv, &s.Dk, &s.Dv};
    int changed = 0;
    for (int i = 0; i < 7; i++)
        if (dims[i] > 0) {
            *field[i] = dims[i];
            changed = 1;
        }
    if (!preset) { /* defaults that follow other flags */
        if (dims[2] < 0)
            s.Hkv = s.Hq;
        if (dims[4] < 0)
            s.Tkv = s.Tq;
        if (dims[6] < 0)
            s.Dv = s.Dk;
    }
    if (causal || top_left) {
        s.causal = top_left ? SDPA_CAUSAL_TOP_LEFT : SDPA_CAUSAL_BOTTOM_RIGHT;
        changed = 1;
    }
    if (dtype >= 0) {
        s.dtype = (sdpa_dtype)dtype;
        changed = 1;
    }
    if (window[0] >= 0) {
        s.window = 1;
        s.window_left = window[0];
        s.window_right = window[1];
        changed = 1;
    }
    if (softcap > 0.0) {
        s.softcap = (float)softcap;
        changed = 1;
    }
    if (alibi || sinks || mask != SDPA_MASK_NONE || kv_lens_arg) {
        s.alibi |= alibi;
        s.sinks |= sinks;
        if (mask != SDPA_MASK_NONE)
            s.mask = mask;
        changed = 1;
    }
    if (preset && changed)
        s.name = "custom";
    if (s.Hq % s.Hkv != 0)
        return bad_usage("--kv-heads (%lld) must divide --heads (%lld)", (long long)s.Hkv,
                         (long long)s.Hq);
    int64_t *kv_lens = NULL; /* [B], owned here; s.kv_lens points at it */
    if (kv_lens_arg) {
        /* at most one value per character pair ("1,2,3"), and never more than B */
        const int most = (int)(strlen(kv_lens_arg) / 2 + 1);
        if ((double)s.B > 1e9 || !(kv_lens = malloc((size_t)s.B * sizeof *kv_lens)))
            return bad_usage("--kv-lens: batch %lld is too large", (long long)s.B);
        const int n = parse_list(kv_lens_arg, kv_lens, (int64_t)most < s.B ? most : (int)s.B);
        if (n != 1 && n != s.B) {
            free(kv_lens);
            return bad_usage("--kv-lens needs one integer >= 0 for all entries or one per "
                             "batch entry (%lld), comma-separated, got '%s'",
                             (long long)s.B, kv_lens_arg);
        }
        for (int64_t b = 1; b < s.B && n == 1; b++)
            kv_lens[b] = kv_lens[0];
        for (int64_t b = 0; b < s.B; b++)
            if (kv_lens[b] > s.Tkv) {
                const long long bad = (long long)kv_lens[b];
                free(kv_lens);
                return bad_usage("--kv-lens: %lld is above --len-kv (%lld)", bad,
                                 (long long)s.Tkv);
            }
        s.kv_lens = kv_lens;
    }
    if (isa != SDPA_ISA_AUTO && !sdpa_isa_supported(isa)) {
        fprintf(stderr, "sdpa-run: isa %s is not usable here (not built in, or the CPU lacks "
                        "it)\n", sdpa_isa_name(isa));
        free(kv_lens);
        return 1;
    }

    sb_problem p;
    if (sb_problem_init(&p, &s) != 0) {
        fprintf(stderr, "sdpa-run: out of memory for the tensors\n");
        free(kv_lens);
        return 1;
    }

    /* --mem first: the children must fork from a process that has not started OpenMP.
     * The reference, when the whole problem is too large for it, runs on one exact piece
     * of (b,h) = (0,0): the last rows (bottom-right alignment keeps them exact), or under
     * top-left the first. */
    mem_use mem_fused = {-1, -1, 0}, mem_ref = {-1, -1, 0};
    const int64_t piece_rows = s.Tq < SB_SLICE_ROWS ? s.Tq : SB_SLICE_ROWS;
    sb_piece ref_piece = {0, 0, s.causal == SDPA_CAUSAL_TOP_LEFT ? 0 : s.Tq - piece_rows,
                          piece_rows};
    const int ref_whole = sb_flops(&s) <= SB_FULL_CHECK_FLOPS;
    if (mem) {
        const mem_job jf = {&p, MEM_FUSED, isa, (int)threads, NULL};
        const mem_job jr = {&p, MEM_REFERENCE, isa, 1, ref_whole ? NULL : &ref_piece};
        mem_fused = mem_in_child(&jf);
        mem_ref = mem_in_child(&jr);
        if (!mem_fused.ok || !mem_ref.ok) {
            fprintf(stderr, "sdpa-run: --mem could not measure (it needs Linux /proc/self/"
                            "clear_refs and status, and a call that succeeds)\n");
            sb_problem_free(&p);
            free(kv_lens);
            return 1;
        }
    }

    sdpa_stats stats;
    sdpa_status st = sb_run_fused(&p, isa, (int)threads, &stats); /* warm-up */
    double *t = malloc((size_t)repeat * sizeof *t);
    if (!t) {
        sb_problem_free(&p);
        free(kv_lens);
        return 1;
    }
    for (int64_t r = 0; r < repeat && st == SDPA_OK; r++) {
        const double t0 = sb_now();
        st = sb_run_fused(&p, isa, (int)threads, &stats);
        t[r] = sb_now() - t0;
    }
    if (st != SDPA_OK) {
        fprintf(stderr, "sdpa-run: sdpa_forward: %s\n", sdpa_strerror(st));
        free(t);
        sb_problem_free(&p);
        free(kv_lens);
        return 1;
    }
    qsort(t, (size_t)repeat, sizeof *t, cmp_double);
    const double med = repeat % 2 ? t[repeat / 2] : 0.5 * (t[repeat / 2 - 1] + t[repeat / 2]);
    const double gflops = sb_flops(&s) / med * 1e-9, kv_gbps = sb_kv_bytes(&s) / med * 1e-9;

    sb_error err = {0, 0, 0, 0};
    sb_expect e = {0};
    char scope[512] = "";
    if (check) {
        st = sb_expect_make(&e, &p);
        if (st != SDPA_OK) {
            fprintf(stderr, "sdpa-run: sdpa_reference: %s\n", sdpa_strerror(st));
            free(t);
            sb_problem_free(&p);
            free(kv_lens);
            return 1;
        }
        err = sb_compare(&e, &p);
        sb_expect_scope(&e, &s, scope, sizeof scope);
    }

    const char *isa_name = sdpa_isa_name(stats.isa);
    const double score_mib = (double)s.B * (double)s.Hq * (double)s.Tq * (double)s.Tkv *
                             sizeof(float) / (1024.0 * 1024.0);
    char feat[256];
    sb_features_str(&s, feat, sizeof feat);
    if (json) {
        printf("{\"isa\":\"%s\",\"threads\":%d,\"threads_requested\":%d,\"shape\":\"%s\","
               "\"B\":%lld,\"Hq\":%lld,\"Hkv\":%lld,\"Tq\":%lld,\"Tkv\":%lld,\"Dk\":%lld,"
               "\"Dv\":%lld,\"causal\":%s,\"top_left\":%s,\"dtype\":\"%s\"",
               isa_name, stats.threads, (int)threads, s.name, (long long)s.B, (long long)s.Hq,
               (long long)s.Hkv, (long long)s.Tq, (long long)s.Tkv, (long long)s.Dk,
               (long long)s.Dv, s.causal ? "true" : "false",
               s.causal == SDPA_CAUSAL_TOP_LEFT ? "true" : "false", dtype_names[s.dtype]);
        if (s.window)
            printf(",\"window_left\":%lld,\"window_right\":%lld", (long long)s.window_left,
                   (long long)s.window_right);
        if (s.softcap > 0.0f)
            printf(",\"softcap\":%.9g", (double)s.softcap);
        printf(",\"alibi\":%s,\"sinks\":%s,\"mask\":\"%s\"", s.alibi ? "true" : "false",
               s.sinks ? "true" : "false",
               s.mask == SDPA_MASK_BOOL ? "bool" : s.mask == SDPA_MASK_ADDITIVE ? "float" : "none");
        if (s.kv_lens) {
            printf(",\"kv_lens\":[");
            for (int64_t b = 0; b < s.B; b++)
                printf("%s%lld", b ? "," : "", (long long)s.kv_lens[b]);
            printf("]");
        }
        printf(",\"repeat\":%lld,\"median_ms\":%.6g,\"min_ms\":%.6g,\"max_ms\":%.6g,"
               "\"gflop\":%.6g,\"gflops\":%.6g,\"kv_gbps\":%.6g",
               (long long)repeat, med * 1e3, t[0] * 1e3, t[repeat - 1] * 1e3,
               sb_flops(&s) * 1e-9, gflops, kv_gbps);
        if (check)
            printf(",\"check\":\"%s\",\"max_abs_err\":%.6g,\"max_rel_err\":%.6g,"
                   "\"bad\":%lld,\"checked\":%lld,\"check_ok\":%s",
                   e.full ? "whole" : "slice", err.max_abs, err.max_rel, (long long)err.bad,
                   (long long)err.checked, err.bad ? "false" : "true");
        if (mem)
            printf(",\"mem_fused_heap_bytes\":%lld,\"mem_fused_rss_kib\":%ld,"
                   "\"mem_reference_heap_bytes\":%lld,\"mem_reference_rss_kib\":%ld,"
                   "\"mem_reference_on\":\"%s\",\"score_matrix_mib\":%.6g",
                   mem_fused.heap_bytes, mem_fused.rss_kib, mem_ref.heap_bytes, mem_ref.rss_kib,
                   ref_whole ? "whole" : s.causal == SDPA_CAUSAL_TOP_LEFT
                                             ? "first rows of (b,h)=(0,0)"
                                             : "last rows of (b,h)=(0,0)",
                   score_mib);
        printf("}\n");
    } else {
        printf("libsdpa %s, isa %s, %d thread%s\n", sdpa_version(), isa_name, stats.threads,
               stats.threads == 1 ? "" : "s");
        printf("shape %s: B=%lld Hq=%lld Hkv=%lld Tq=%lld Tkv=%lld Dk=%lld Dv=%lld%s%s, "
               "%.4g GFLOP\n",
               s.name, (long long)s.B, (long long)s.Hq, (long long)s.Hkv, (long long)s.Tq,
               (long long)s.Tkv, (long long)s.Dk, (long long)s.Dv, s.causal ? " causal" : "",
               feat, sb_flops(&s) * 1e-9);
        printf("fused: median %.4g ms of %lld (min %.4g, max %.4g): %.2f GFLOP/s, "
               "K/V read %.2f GB/s\n",
               med * 1e3, (long long)repeat, t[0] * 1e3, t[repeat - 1] * 1e3, gflops, kv_gbps);
        if (check)
            printf("check against sdpa_reference on the %s: max_abs_err %.3g, max_rel_err "
                   "%.3g, %lld of %lld outside |o - r| <= 1e-5 + %.3g |r|: %s\n",
                   scope, err.max_abs, err.max_rel, (long long)err.bad,
                   (long long)err.checked, sb_rel_tol(s.dtype), err.bad ? "FAIL" : "ok");
        if (mem) {
            char ref_on[160] = "whole problem";
            if (!ref_whole)
                snprintf(ref_on, sizeof ref_on, "rows %lld-%lld of (b,h)=(0,0)",
                         (long long)ref_piece.i0,
                         (long long)(ref_piece.i0 + ref_piece.rows - 1));
            printf("memory of one call, peak above what was in use before it:\n"
                   "  fused      heap %12lld B   resident %+6ld KiB   (%d thread%s)\n"
                   "  reference  heap %12lld B   resident %+6ld KiB   (%s)\n"
                   "  heap: exact, counted by sdpa-run's malloc wrappers%s; resident: "
                   "VmHWM - VmRSS,\n"
                   "  to ~128 KiB (page size, per-CPU counter batching). For scale, a "
                   "materialised\n  B*Hq*Tq*Tkv fp32 score matrix is %.1f MiB.\n",
                   mem_fused.heap_bytes, mem_fused.rss_kib, stats.threads,
                   stats.threads == 1 ? "" : "s", mem_ref.heap_bytes, mem_ref.rss_kib, ref_on,
                   HEAP_COUNTED ? "" : " (not in this build: -1)", score_mib);
        }
    }
    free(t);
    if (check)
        sb_expect_free(&e);
    sb_problem_free(&p);
    free(kv_lens);
    return err.bad ? 1 : 0;
}
