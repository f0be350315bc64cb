/*
 * sdpa-run - one attention configuration from command-line flags, every descriptor
 * feature included (16-bit storage, paged and quantized KV caches, windows, softcap,
 * ALiBi, sinks, key lengths, masks, top-left causal): the ISA used, the median time,
 * GFLOP/s and K/V GB/s; with --check the largest errors against the reference; with --mem
 * the memory one fused call and one reference call add, and the KV cache's as stored.
 * This is how a user tries one configuration on their own machine and how scripts
 * measure (--json: one object on one line).
 *
 * It is plain C with no Google Benchmark dependency, so it builds wherever libsdpa does
 * (an aarch64 cross-build included). It is not the benchmark suite (`make bench` is:
 * repetitions of many cases, the FMA peak, a baseline); it shares the shapes, the flop
 * count and the check with it through bench/shim.c, and the case and its data with the
 * tests through common/case.c. It links the static library for the ISA registry (the
 * names --isa takes).
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../bench/shim.h"
#include "../src/internal.h"
#include "sdpa.h"

/* ---- options: one table, parsed into one struct --------------------------------- */

typedef struct opts {
    int64_t dim[7];     /* B Hq Hkv Tq Tkv Dk Dv; -1 when not given */
    const char *shape;  /* --shape, or NULL */
    int causal, top_left, alibi, sinks, check, mem, json, help;
    int dtype;          /* an sdpa_dtype, or -1 when not given */
    int kv_dtype;       /* K and V's sdpa_dtype, or -1 when not given */
    int64_t page_size;  /* tokens per page, 0 = contiguous; -1 when not given */
    int layout;         /* SC_BHTD or SC_BTHD, or -1 when not given */
    int kv_scale;       /* an SC_QS_* granularity, or -1 when not given */
    int64_t kv_group;   /* channels per scale, 0 = the row; -1 when not given */
    int kv_scale_dtype; /* the scales' sdpa_dtype, or -1 when not given */
    int compute;        /* an sdpa_compute value */
    int pages;          /* SC_GUARD_HUGE or SC_GUARD_NONE, or -1 when not given */
    int mask;           /* an sdpa_mask_kind; SDPA_MASK_NONE when not given */
    int64_t window[2];  /* L, R; -1 when not given */
    double softcap;     /* 0 when not given */
    const char *kv_lens;
    int isa;            /* an sdpa_isa */
    int64_t threads, repeat;
} opts;

typedef enum arg_kind {
    ARG_FLAG,   /* no value: sets an int to 1 */
    ARG_INT,    /* an integer in [lo, hi] (int64_t) */
    ARG_CHOICE, /* one of a list of names (int: the name's value) */
    ARG_ISA,    /* auto or an ISA name of the library's registry (int) */
    ARG_SHAPE,  /* a suite shape's name (const char *) */
    ARG_PAIR,   /* L,R: two integers in [0, hi] (int64_t[2]) */
    ARG_REAL,   /* a finite number > 0 (double) */
    ARG_TEXT    /* kept as given, checked later (const char *) */
} arg_kind;

typedef struct choice {
    const char *name;
    int value;
} choice;

static const choice dtypes[] = {{"f32", SDPA_F32}, {"f16", SDPA_F16}, {"bf16", SDPA_BF16}, {0, 0}};
static const choice kv_dtypes[] = {{"f32", SDPA_F32},          {"f16", SDPA_F16},
                                   {"bf16", SDPA_BF16},        {"int8", SDPA_I8},
                                   {"fp8-e4m3", SDPA_FP8_E4M3}, {"fp8-e5m2", SDPA_FP8_E5M2},
                                   {"int4", SDPA_I4},          {0, 0}};
static const choice kv_scales[] = {{"row", SC_QS_ROW}, {"head", SC_QS_HEAD},
                                   {"tensor", SC_QS_TENSOR}, {0, 0}};
static const choice scale_dtypes[] = {{"f32", SDPA_F32}, {"f16", SDPA_F16}, {0, 0}};
static const choice computes[] = {{"f32", SDPA_COMPUTE_F32}, {"bf16", SDPA_COMPUTE_BF16}, {0, 0}};
static const choice layouts[] = {{"bhtd", SC_BHTD}, {"bthd", SC_BTHD}, {0, 0}};
static const choice pagings[] = {{"huge", SC_GUARD_HUGE}, {"heap", SC_GUARD_NONE}, {0, 0}};
static const choice masks[] = {{"bool", SDPA_MASK_BOOL}, {"float", SDPA_MASK_ADDITIVE}, {0, 0}};

/* The name a value has in a list of choices (the flag's spelling, which --json repeats). */
static const char *value_of(const choice *list, int value) {
    for (int k = 0; list[k].name; k++)
        if (list[k].value == value)
            return list[k].name;
    return "?";
}

typedef struct option_spec {
    const char *name;
    arg_kind kind;
    const char *value;     /* the value's name in the help */
    size_t dest;           /* offsetof(opts, ...) */
    int64_t lo, hi;        /* ARG_INT, ARG_PAIR bounds */
    const choice *choices; /* ARG_CHOICE */
    const char *help;      /* lines after the first are indented under it */
} option_spec;

#define DIM(i) (offsetof(opts, dim) + (i) * sizeof(int64_t))
static const option_spec options[] = {
    {"shape", ARG_SHAPE, "NAME", offsetof(opts, shape), 0, 0, NULL,
     "start from a suite shape (the flags below override it)"},
    {"batch", ARG_INT, "N", DIM(0), 1, INT64_MAX, NULL, "B, batch entries (default 1)"},
    {"heads", ARG_INT, "N", DIM(1), 1, INT64_MAX, NULL, "Hq, query heads (default 8)"},
    {"kv-heads", ARG_INT, "N", DIM(2), 1, INT64_MAX, NULL,
     "Hkv, key/value heads, divides Hq (default Hq)"},
    {"len-q", ARG_INT, "N", DIM(3), 1, INT64_MAX, NULL, "Tq, query rows (default 512)"},
    {"len-kv", ARG_INT, "N", DIM(4), 1, INT64_MAX, NULL, "Tkv, key/value rows (default Tq)"},
    {"dim", ARG_INT, "N", DIM(5), 1, INT64_MAX, NULL, "Dk, query/key head dim (default 64)"},
    {"dim-v", ARG_INT, "N", DIM(6), 1, INT64_MAX, NULL, "Dv, value head dim (default Dk)"},
    {"causal", ARG_FLAG, NULL, offsetof(opts, causal), 0, 0, NULL,
     "bottom-right causal mask (default off)"},
    {"top-left", ARG_FLAG, NULL, offsetof(opts, top_left), 0, 0, NULL,
     "causal, top-left aligned (row i sees keys j <= i, PyTorch's\n"
     "is_causal); implies --causal"},
    {"dtype", ARG_CHOICE, "T", offsetof(opts, dtype), 0, 0, dtypes,
     "storage of Q, K, V and O alike (default f32; --kv-dtype sets\n"
     "K and V apart)"},
    {"kv-dtype", ARG_CHOICE, "T", offsetof(opts, kv_dtype), 0, 0, kv_dtypes,
     "storage of K and V, over --dtype's (default: --dtype's);\n"
     "int8, fp8 and int4 are codes with scales (--kv-scale),\n"
     "written by sdpa_kv_write from fp32 data"},
    {"page-size", ARG_INT, "N", offsetof(opts, page_size), 0, 1 << 20, NULL,
     "K and V in a pool of N-token pages, in shuffled order, read\n"
     "through a block table (sdpa_pages); 0 = contiguous (default)"},
    {"layout", ARG_CHOICE, "L", offsetof(opts, layout), 0, 0, layouts,
     "memory order of every view: bhtd, [B, H, T, D] (default), or\n"
     "bthd, [B, T, H, D], tokens-major (a paged pool's pages then\n"
     "[page, Hkv, D])"},
    {"kv-scale", ARG_CHOICE, "KIND", offsetof(opts, kv_scale), 0, 0, kv_scales,
     "scales of a quantized K/V: row, one per token and head (or\n"
     "per --kv-group channels) computed by sdpa_kv_write (default);\n"
     "head or tensor, one per head or one in all, calibrated from\n"
     "the data's largest |x|"},
    {"kv-group", ARG_INT, "G", offsetof(opts, kv_group), 0, SDPA_MAX_HEAD_DIM, NULL,
     "channels per scale under --kv-scale row, dividing Dk and Dv\n"
     "(even for int4); 0 = the whole row (default)"},
    {"kv-scale-dtype", ARG_CHOICE, "T", offsetof(opts, kv_scale_dtype), 0, 0, scale_dtypes,
     "the scales' storage (default f32)"},
    {"compute", ARG_CHOICE, "P", offsetof(opts, compute), 0, 0, computes,
     "precision of the products (default f32): bf16 rounds Q, K,\n"
     "V and P to bf16 and accumulates in fp32 (include/sdpa.h)"},
    {"pages", ARG_CHOICE, "KIND", offsetof(opts, pages), 0, 0, pagings,
     "memory of the buffers of 2 MiB and more: huge, advised onto\n"
     "transparent huge pages as the bench times them (default;\n"
     "Linux); heap, the C heap's pages"},
    {"window", ARG_PAIR, "L,R", offsetof(opts, window), 0, SDPA_MAX_DIM, NULL,
     "sliding window: row i sees keys d(i)-L .. d(i)+R,\n"
     "d(i) = i + Tkv - Tq (under --top-left: i)"},
    {"softcap", ARG_REAL, "C", offsetof(opts, softcap), 0, 0, NULL,
     "logit soft-capping s = C tanh(s / C), C > 0"},
    {"alibi", ARG_FLAG, NULL, offsetof(opts, alibi), 0, 0, NULL,
     "ALiBi, the paper's slopes for Hq heads (sdpa_alibi_slopes)"},
    {"sinks", ARG_FLAG, NULL, offsetof(opts, sinks), 0, 0, NULL,
     "a sink logit per head, uniform in [-1, 3) (head 1: -inf,\n"
     "no sink)"},
    {"kv-lens", ARG_TEXT, "N[,N]", offsetof(opts, kv_lens), 0, 0, NULL,
     "valid keys per batch entry (<= Tkv): one per entry, or one\n"
     "for all"},
    {"mask", ARG_CHOICE, "KIND", offsetof(opts, mask), 0, 0, masks,
     "one [Tq, Tkv] mask broadcast over batch and heads (stride 0)\n"
     "hiding a random ~10% of the (i, j) pairs and all of row 3;\n"
     "float is additive: -inf there, a bias in [-2, 2) elsewhere"},
    {"isa", ARG_ISA, "NAME", offsetof(opts, isa), 0, 0, NULL, "kernel table (default auto)"},
    {"threads", ARG_INT, "N", offsetof(opts, threads), 0, 1 << 20, NULL,
     "thread cap, 0 = OpenMP's default (default 0)"},
    {"repeat", ARG_INT, "N", offsetof(opts, repeat), 1, 1 << 20, NULL,
     "timed calls after one warm-up call (default 5)"},
    {"check", ARG_FLAG, NULL, offsetof(opts, check), 0, 0, NULL,
     "compare with sdpa_reference (the whole output when the\n"
     "reference needs at most 4 GFLOP, else the first, middle and\n"
     "last rows of two heads, those that are exact sub-problems);\n"
     "exit 1 if |o - r| > 1e-5 + 1e-4 |r| (16-bit output:\n"
     "+ 2^-10 |r| f16, 2^-7 |r| bf16) anywhere it looked; under\n"
     "--compute bf16 the reference computes in the mode too and\n"
     "the 1e-5 becomes the mode's 2^-6 max|v| (common/case.h)"},
    {"mem", ARG_FLAG, NULL, offsetof(opts, mem), 0, 0, NULL,
     "memory of one fused call and of one reference call: heap\n"
     "bytes (exact, sdpa_stats.scratch_bytes) and resident KiB\n"
     "(coarse), each in a child process (Linux); and the K/V\n"
     "cache as stored (codes, scales, block table)"},
    {"json", ARG_FLAG, NULL, offsetof(opts, json), 0, 0, NULL,
     "one JSON object on one line instead of text"},
    {"help", ARG_FLAG, NULL, offsetof(opts, help), 0, 0, NULL, "this text"},
};
#undef DIM
enum { NOPTIONS = (int)(sizeof options / sizeof options[0]) };

#define HELP_INDENT "\n                     " /* continuation lines of an option's help */

/* The k-th name a value of o may take (ARG_CHOICE, ARG_ISA, ARG_SHAPE), or NULL past
 * the last. */
static const char *value_name(const option_spec *o, int k) {
    int n;
    const sdpa_isa_info *rows;
    switch (o->kind) {
    case ARG_CHOICE:
        return o->choices[k].name;
    case ARG_ISA:
        rows = sdpa_isa_registry(&n);
        return k == 0 ? "auto" : k <= n ? rows[k - 1].name : NULL;
    case ARG_SHAPE:
        return k < sb_suite_len ? sb_suite[k].name : NULL;
    default:
        return NULL;
    }
}

static void usage(FILE *f) {
    fprintf(f, "usage: sdpa-run [options]\n");
    for (int i = 0; i < NOPTIONS; i++) {
        const option_spec *o = &options[i];
        char head[40];
        snprintf(head, sizeof head, "--%s%s%s", o->name, o->value ? " " : "",
                 o->value ? o->value : "");
        fprintf(f, "  %-18s ", head);
        for (const char *h = o->help; *h; h++)
            fprintf(f, *h == '\n' ? HELP_INDENT : "%c", *h);
        int col = 0; /* the names a value may take, wrapped at 60 columns of help */
        for (int k = 0; value_name(o, k); k++) {
            const char *name = value_name(o, k);
            const int len = (int)strlen(name);
            if (k == 0) {
                fprintf(f, HELP_INDENT "one of: %s", name);
                col = 8 + len;
            } else if (col + 2 + len > 60) {
                fprintf(f, "," HELP_INDENT "%s", name);
                col = len;
            } else {
                fprintf(f, ", %s", name);
                col += 2 + len;
            }
        }
        fprintf(f, "\n");
    }
    fprintf(f, "Bad flags exit with status 2.\n");
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

/* Stores option o's value arg into *op; 0, or 2 (after the usage) when it is bad. */
static int set_option(opts *op, const option_spec *o, const char *arg) {
    void *dest = (char *)op + o->dest;
    switch (o->kind) {
    case ARG_FLAG:
        *(int *)dest = 1;
        return 0;
    case ARG_INT: {
        char *end;
        errno = 0;
        const long long v = strtoll(arg, &end, 10);
        if (errno || end == arg || *end || v < o->lo || v > o->hi) {
            if (o->hi == INT64_MAX)
                return bad_usage("--%s needs an integer >= %lld, got '%s'", o->name,
                                 (long long)o->lo, arg);
            return bad_usage("--%s needs an integer in [%lld, %lld], got '%s'", o->name,
                             (long long)o->lo, (long long)o->hi, arg);
        }
        *(int64_t *)dest = v;
        return 0;
    }
    case ARG_CHOICE:
        for (int k = 0; o->choices[k].name; k++)
            if (strcmp(arg, o->choices[k].name) == 0) {
                *(int *)dest = o->choices[k].value;
                return 0;
            }
        return bad_usage("unknown --%s '%s'", o->name, arg);
    case ARG_ISA: {
        int n;
        const sdpa_isa_info *rows = sdpa_isa_registry(&n);
        if (strcmp(arg, "auto") == 0) {
            *(int *)dest = SDPA_ISA_AUTO;
            return 0;
        }
        for (int k = 0; k < n; k++)
            if (strcmp(arg, rows[k].name) == 0) {
                *(int *)dest = rows[k].isa;
                return 0;
            }
        return bad_usage("unknown --%s '%s'", o->name, arg);
    }
    case ARG_SHAPE:
        if (!sb_find_shape(arg))
            return bad_usage("unknown --%s '%s'", o->name, arg);
        *(const char **)dest = arg;
        return 0;
    case ARG_PAIR: {
        int64_t *pair = dest;
        if (parse_list(arg, pair, 2) != 2 || pair[0] > o->hi || pair[1] > o->hi)
            return bad_usage("--%s needs %s: two integers 0 .. %lld, got '%s'", o->name,
                             o->value, (long long)o->hi, arg);
        return 0;
    }
    case ARG_REAL: {
        char *end;
        errno = 0;
        const double v = strtod(arg, &end);
        if (errno || end == arg || *end || !(v > 0.0) || v > 3.4e38)
            return bad_usage("--%s needs a finite number > 0, got '%s'", o->name, arg);
        *(double *)dest = v;
        return 0;
    }
    case ARG_TEXT:
        *(const char **)dest = arg;
        return 0;
    }
    return 2;
}

/* getopt_long's value for options[i]: above every character it returns itself. */
#define OPTION_VAL(i) (256 + (i))

/* Parses argv into *op, up to --help; 0, or the exit status (2: a bad flag, after the
 * usage). */
static int parse(int argc, char **argv, opts *op) {
    *op = (opts){.dim = {-1, -1, -1, -1, -1, -1, -1}, .dtype = -1, .kv_dtype = -1,
                 .page_size = -1, .layout = -1, .pages = -1, .kv_scale = -1, .kv_group = -1, .kv_scale_dtype = -1,
                 .window = {-1, -1}, .repeat = 5};
    struct option longopts[NOPTIONS + 1];
    for (int i = 0; i < NOPTIONS; i++)
        longopts[i] = (struct option){options[i].name,
                                      options[i].kind == ARG_FLAG ? no_argument
                                                                  : required_argument,
                                      NULL, OPTION_VAL(i)};
    longopts[NOPTIONS] = (struct option){NULL, 0, NULL, 0};
    opterr = 0; /* our own message, then the usage */
    int c;
    /* The leading ':' makes a missing value ':' rather than '?', for a clearer message. */
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        if (c == ':')
            return bad_usage("%s needs a value", argv[optind - 1]);
        if (c < OPTION_VAL(0) || c >= OPTION_VAL(NOPTIONS))
            return bad_usage("bad option '%s'", argv[optind - 1]);
        const int st = set_option(op, &options[c - OPTION_VAL(0)], optarg);
        if (st || op->help)
            return st;
    }
    if (optind < argc)
        return bad_usage("unexpected argument '%s'", argv[optind]);
    return 0;
}

/* ---- --mem: the memory one call adds, two ways -----------------------------------
 *
 * heap: the call's scratch_bytes (sdpa_stats: every byte libsdpa allocates for it). Exact,
 *   but it sees only the heap. The reference on a piece also needs the piece's output
 *   buffer, which sdpa-run allocates for that call alone: reported beside it.
 * resident: VmHWM after the call minus VmRSS before it (/proc/self/status), after
 *   resetting VmHWM. It sees everything (stacks, mmap) but counts 4 KiB pages, and the
 *   kernel batches its RSS counters per CPU, so it is only good to ~128 KiB.
 * Each path is measured in a forked child, after one small warm-up call down the same
 * path, so nothing the parent did and nothing a first call brings in is charged. */

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
    const sc_case *c;  /* the case, built in the child */
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
    const sc_case c = {.B = 1, .Hq = heads, .Hkv = heads, .Tq = 256, .Tkv = 256, .Dk = 64,
                       .Dv = 64, .guard = SC_GUARD_NONE, .seed = 1};
    sc_tensors w;
    if (sc_tensors_make(&w, &c) != 0)
        return -1;
    const sdpa_status st = job->what == MEM_FUSED ? sb_run_fused(&w, job->isa, job->threads, NULL)
                                                  : sb_run_reference(&w, NULL);
    sc_tensors_free(&w);
    return st == SDPA_OK ? 0 : -1;
}

typedef struct mem_use {
    long long heap_bytes;   /* scratch_bytes */
    long long caller_bytes; /* what sdpa-run allocated for this call alone */
    long rss_kib;         /* VmHWM after - VmRSS before */
    int ok;
} mem_use;

/* Runs the job in a forked child and returns what it measured. The parent must not
 * have used OpenMP yet: a forked child inherits no threads, and libgomp's pool does not
 * survive fork. So the child builds the case itself (a KV cache is filled by
 * sdpa_kv_write, on an OpenMP team), before the warm-up: its tensors, the output's
 * sentinels written, are resident before the measurement, as the parent's are. */
static mem_use mem_in_child(const mem_job *job) {
    mem_use m = {-1, 0, -1, 0};
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
        sc_tensors t;
        const int made = sc_tensors_make(&t, job->c) == 0;
        /* A piece's fp32 output gets its own buffer, allocated and written before the
         * measurement: sdpa-run's memory, not the call's (reported beside it). */
        float *piece_out = NULL;
        size_t piece_bytes = 0;
        if (made && job->piece) {
            piece_bytes = (size_t)(job->piece->rows * t.desc.dim_v) * sizeof(float);
            if ((piece_out = malloc(piece_bytes)) != NULL)
                memset(piece_out, 0, piece_bytes);
        }
        if (made && (!job->piece || piece_out) && warm_up(job) == 0 && reset_hwm() == 0) {
            const long rss0 = status_kib("VmRSS:");
            sdpa_stats stats = {0};
            sdpa_status st;
            if (job->what == MEM_FUSED)
                st = sb_run_fused(&t, job->isa, job->threads, &stats);
            else if (job->piece)
                st = sb_reference_piece(&t, job->piece, piece_out, &stats);
            else
                st = sb_run_reference(&t, &stats);
            const long hwm = status_kib("VmHWM:");
            m.heap_bytes = stats.scratch_bytes;
            m.caller_bytes = (long long)piece_bytes;
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

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int quantized(sdpa_dtype t) { return t >= SDPA_I8 && t <= SDPA_I4; }

/* The KV-cache flags against the case they built (a suite shape's storage included): the
 * combinations the library would refuse, refused here with the flag to blame (a failed
 * sc_tensors_make says no more than "out of memory"). 0, or the exit status. */
static int check_kv(const opts *op, sc_case *c) {
    const int q = quantized(c->dt[1]) || quantized(c->dt[2]);
    if (!q && (op->kv_scale >= 0 || op->kv_group >= 0 || op->kv_scale_dtype >= 0))
        return bad_usage("--kv-scale, --kv-group and --kv-scale-dtype need a quantized K/V "
                         "(--kv-dtype int8, fp8-e4m3, fp8-e5m2 or int4)");
    if (!q)
        return 0;
    if (c->v_in_k) /* V would read K's codes with scales of its own */
        return bad_usage("--kv-dtype %s: this shape's V is a view of K's memory, which "
                         "sdpa-run keeps unquantized", value_of(kv_dtypes, c->dt[1]));
    if (c->qscale != SC_QS_ROW) {
        if (op->kv_group > 0)
            return bad_usage("--kv-group needs --kv-scale row (one scale per head or per "
                             "tensor covers every channel)");
        c->qgroup = 0;
    }
    if (c->qgroup > 0 && (c->Dk % c->qgroup != 0 || c->Dv % c->qgroup != 0))
        return bad_usage("--kv-group %lld must divide --dim (%lld) and --dim-v (%lld)",
                         (long long)c->qgroup, (long long)c->Dk, (long long)c->Dv);
    if ((c->dt[1] == SDPA_I4 || c->dt[2] == SDPA_I4) &&
        (c->Dk % 2 != 0 || c->Dv % 2 != 0 || c->qgroup % 2 != 0))
        return bad_usage("--kv-dtype int4 packs two codes a byte and starts rows and groups "
                         "on bytes: --dim, --dim-v and --kv-group must be even");
    return 0;
}

/* The case the options describe: --shape's, or the defaults, with every given flag
 * applied over it; *name is the shape's name, or "custom" once a flag changed it.
 * kv_lens gets the array the case points at (free it). 0, or the exit status. */
static int make_case(const opts *op, sc_case *c, const char **name, int64_t **kv_lens) {
    int status;
    const sb_shape *preset = op->shape ? sb_find_shape(op->shape) : NULL;
    *c = preset ? preset->c
                : (sc_case){.B = 1, .Hq = 8, .Tq = 512, .Dk = 64, .guard = SC_GUARD_HUGE,
                            .seed = 1};
    *name = preset ? preset->name : "custom";
    *kv_lens = NULL;
    int64_t *field[7] = {&c->B, &c->Hq, &c->Hkv, &c->Tq, &c->Tkv, &c->Dk, &c->Dv};
    int changed = 0;
    for (int i = 0; i < 7; i++)
        if (op->dim[i] > 0) {
            *field[i] = op->dim[i];
            changed = 1;
        }
    if (!preset) { /* defaults that follow other flags */
        if (op->dim[2] < 0)
            c->Hkv = c->Hq;
        if (op->dim[4] < 0)
            c->Tkv = c->Tq;
        if (op->dim[6] < 0)
            c->Dv = c->Dk;
    }
    if (op->causal || op->top_left) {
        c->causal = op->top_left ? SDPA_CAUSAL_TOP_LEFT : SDPA_CAUSAL_BOTTOM_RIGHT;
        changed = 1;
    }
    if (op->dtype >= 0) {
        for (int i = 0; i < 4; i++)
            c->dt[i] = (sdpa_dtype)op->dtype;
        changed = 1;
    }
    if (op->kv_dtype >= 0) {
        c->dt[1] = c->dt[2] = (sdpa_dtype)op->kv_dtype;
        changed = 1;
    }
    if (op->page_size >= 0) {
        c->page = op->page_size;
        changed = 1;
    }
    if (op->layout >= 0) {
        c->layout = op->layout;
        changed = 1;
    }
    if (op->pages >= 0) /* where the buffers live, not the shape: the name stays */
        c->guard = op->pages;
    if (op->kv_scale >= 0 || op->kv_group >= 0 || op->kv_scale_dtype >= 0) {
        if (op->kv_scale >= 0)
            c->qscale = op->kv_scale;
        if (op->kv_group >= 0)
            c->qgroup = op->kv_group;
        if (op->kv_scale_dtype >= 0)
            c->qscale_dt = (sdpa_dtype)op->kv_scale_dtype;
        changed = 1;
    }
    if (op->compute != SDPA_COMPUTE_F32) {
        c->compute = op->compute;
        changed = 1;
    }
    if (op->window[0] >= 0) {
        c->window = 1;
        c->wl = op->window[0];
        c->wr = op->window[1];
        changed = 1;
    }
    if (op->softcap > 0.0) {
        c->softcap = (float)op->softcap;
        changed = 1;
    }
    if (op->alibi || op->sinks || op->mask != SDPA_MASK_NONE || op->kv_lens) {
        c->alibi |= op->alibi;
        c->sinks |= op->sinks;
        if (op->mask != SDPA_MASK_NONE) { /* one pattern for every entry and head */
            c->mask = op->mask;
            c->mask_bcast = SC_BCAST_B | SC_BCAST_H;
            c->mask_hidden = 0.1f;
        }
        changed = 1;
    }
    if (changed)
        *name = "custom";
    if (c->Hq % c->Hkv != 0)
        return bad_usage("--kv-heads (%lld) must divide --heads (%lld)", (long long)c->Hkv,
                         (long long)c->Hq);
    if ((status = check_kv(op, c)) != 0)
        return status;
    if (op->kv_lens) {
        /* at most one value per character pair ("1,2,3"), and never more than B */
        const int most = (int)(strlen(op->kv_lens) / 2 + 1);
        if ((double)c->B > 1e9 || !(*kv_lens = malloc((size_t)c->B * sizeof **kv_lens)))
            return bad_usage("--kv-lens: batch %lld is too large", (long long)c->B);
        int64_t *kl = *kv_lens;
        const int n = parse_list(op->kv_lens, kl, (int64_t)most < c->B ? most : (int)c->B);
        if (n != 1 && n != c->B)
            return bad_usage("--kv-lens needs one integer >= 0 for all entries or one per "
                             "batch entry (%lld), comma-separated, got '%s'",
                             (long long)c->B, op->kv_lens);
        for (int64_t b = 1; b < c->B && n == 1; b++)
            kl[b] = kl[0];
        for (int64_t b = 0; b < c->B; b++)
            if (kl[b] > c->Tkv)
                return bad_usage("--kv-lens: %lld is above --len-kv (%lld)", (long long)kl[b],
                                 (long long)c->Tkv);
        c->kv_lens = kl;
    }
    return 0;
}

/* ---- the KV cache's memory (--mem, --json) ------------------------------------------ */

typedef struct kv_memory {
    double codes;  /* K and V as stored: a paged pool or a contiguous cache */
    double scales; /* their scale arrays */
    double table;  /* the block table */
    double fp32;   /* K and V as contiguous fp32 [B, Hkv, Tkv, D], for comparison */
} kv_memory;

/* Bytes of one operand's scales (0 when it has none): the extent of the view over the
 * pool's pages (or the batch entries), the heads, the slots (or tokens) and the groups. */
static double scale_bytes(const sc_tensors *t, const sdpa_scales *sc, int64_t dim) {
    if (!sc->data)
        return 0.0;
    const sdpa_desc *d = &t->desc;
    const int paged = d->pages.block_table != NULL;
    const int64_t nb = paged ? d->pages.num_pages : t->VB;
    const int64_t nt = paged ? d->pages.page_size : d->len_kv;
    const int64_t ng = sc->group ? dim / sc->group : 1;
    const int64_t last = (nb - 1) * sc->stride_b + (d->heads_kv - 1) * sc->stride_h +
                         (nt - 1) * sc->stride_t + ng - 1;
    return (double)(last + 1) * (double)sc_dtype_size(sc->dtype);
}

/* bytes as "512.0 MiB", "16.0 KiB" or "64 B" in buf. */
static const char *size_str(double bytes, char *buf, size_t n) {
    if (bytes >= 1 << 20)
        snprintf(buf, n, "%.1f MiB", bytes / (1 << 20));
    else if (bytes >= 1 << 10)
        snprintf(buf, n, "%.1f KiB", bytes / (1 << 10));
    else
        snprintf(buf, n, "%.0f B", bytes);
    return buf;
}

static kv_memory kv_memory_of(const sc_tensors *t, const sc_case *c) {
    const sdpa_desc *d = &t->desc;
    kv_memory m = {0};
    for (int i = 0; i < 2; i++) {
        if (i == 1 && c->v_in_k) /* V is K's memory */
            break;
        m.codes += c->page > 0 || quantized(c->dt[1 + i])
                       ? (double)t->cache_bytes[i]
                       : (double)t->elems[1 + i] * (double)sc_dtype_size(c->dt[1 + i]);
    }
    m.scales = scale_bytes(t, &d->k_scales, d->dim_qk) + scale_bytes(t, &d->v_scales, d->dim_v);
    if (d->pages.block_table)
        m.table = (double)t->VB * (double)d->pages.stride * sizeof(int32_t);
    m.fp32 = (double)t->VB * (double)d->heads_kv * (double)d->len_kv *
             (double)(d->dim_qk + (c->v_in_k ? 0 : d->dim_v)) * sizeof(float);
    return m;
}

int main(int argc, char **argv) {
    opts op;
    int status = parse(argc, argv, &op);
    if (status)
        return status;
    if (op.help) {
        usage(stdout);
        return 0;
    }
    sc_case s;
    const char *name;
    int64_t *kv_lens;
    if ((status = make_case(&op, &s, &name, &kv_lens)) != 0) {
        free(kv_lens);
        return status;
    }
    const sdpa_isa isa = (sdpa_isa)op.isa;
    const int threads = (int)op.threads;
    const int64_t repeat = op.repeat;
    if (isa != SDPA_ISA_AUTO && !sdpa_isa_supported(isa)) {
        fprintf(stderr, "sdpa-run: isa %s is not usable here (not built in, or the CPU lacks "
                        "it)\n", sdpa_isa_name(isa));
        free(kv_lens);
        return 1;
    }

    /* --mem first: the children must fork from a process that has not started OpenMP
     * (mem_in_child), so before this one builds its tensors. The reference, when the
     * whole problem is too large for it, runs on one exact piece of (b,h) = (0,0): the
     * last rows (bottom-right alignment keeps them exact), or under top-left the first. */
    mem_use mem_fused = {-1, 0, -1, 0}, mem_ref = {-1, 0, -1, 0};
    const int64_t piece_rows = s.Tq < SB_SLICE_ROWS ? s.Tq : SB_SLICE_ROWS;
    const sb_piece ref_piece = {0, 0, s.causal == SDPA_CAUSAL_TOP_LEFT ? 0 : s.Tq - piece_rows,
                                piece_rows};
    const int ref_whole = sb_flops(&s) <= SB_FULL_CHECK_FLOPS;
    if (op.mem) {
        const mem_job jf = {&s, MEM_FUSED, isa, threads, NULL};
        const mem_job jr = {&s, MEM_REFERENCE, isa, 1, ref_whole ? NULL : &ref_piece};
        mem_fused = mem_in_child(&jf);
        mem_ref = mem_in_child(&jr);
        if (!mem_fused.ok || !mem_ref.ok) {
            fprintf(stderr, "sdpa-run: --mem could not measure (it needs Linux /proc/self/"
                            "clear_refs and status, memory for the tensors, and a call that "
                            "succeeds)\n");
            free(kv_lens);
            return 1;
        }
    }

    sc_tensors p;
    if (sc_tensors_make(&p, &s) != 0) {
        fprintf(stderr, "sdpa-run: out of memory for the tensors\n");
        free(kv_lens);
        return 1;
    }
    const kv_memory kvm = kv_memory_of(&p, &s);

    sdpa_stats stats;
    sdpa_status st = sb_run_fused(&p, isa, threads, &stats); /* warm-up */
    double *t = malloc((size_t)repeat * sizeof *t);
    if (!t) {
        sc_tensors_free(&p);
        free(kv_lens);
        return 1;
    }
    for (int64_t r = 0; r < repeat && st == SDPA_OK; r++) {
        const double t0 = sb_now();
        st = sb_run_fused(&p, isa, threads, &stats);
        t[r] = sb_now() - t0;
    }
    if (st != SDPA_OK) {
        fprintf(stderr, "sdpa-run: sdpa_forward: %s\n", sdpa_strerror(st));
        free(t);
        sc_tensors_free(&p);
        free(kv_lens);
        return 1;
    }
    qsort(t, (size_t)repeat, sizeof *t, cmp_double);
    const double med = repeat % 2 ? t[repeat / 2] : 0.5 * (t[repeat / 2 - 1] + t[repeat / 2]);
    const double gflops = sb_flops(&s) / med * 1e-9, kv_gbps = sb_kv_bytes(&s) / med * 1e-9;

    sc_error err = {0};
    sb_expect e = {0};
    char scope[512] = "";
    if (op.check) {
        st = sb_expect_make(&e, &p);
        if (st != SDPA_OK) {
            fprintf(stderr, "sdpa-run: sdpa_reference: %s\n", sdpa_strerror(st));
            free(t);
            sc_tensors_free(&p);
            free(kv_lens);
            return 1;
        }
        err = sb_compare(&e, &p);
        sb_expect_scope(&e, &p, scope, sizeof scope);
    }

    const char *isa_name = sdpa_isa_name(stats.isa);
    const double score_mib = (double)s.B * (double)s.Hq * (double)s.Tq * (double)s.Tkv *
                             sizeof(float) / (1024.0 * 1024.0);
    if (op.json) {
        printf("{\"isa\":\"%s\",\"threads\":%d,\"threads_requested\":%d,\"shape\":\"%s\","
               "\"B\":%lld,\"Hq\":%lld,\"Hkv\":%lld,\"Tq\":%lld,\"Tkv\":%lld,\"Dk\":%lld,"
               "\"Dv\":%lld,\"causal\":%s,\"top_left\":%s,\"dtype\":\"%s\"",
               isa_name, stats.threads, threads, name, (long long)s.B, (long long)s.Hq,
               (long long)s.Hkv, (long long)s.Tq, (long long)s.Tkv, (long long)s.Dk,
               (long long)s.Dv, s.causal ? "true" : "false",
               s.causal == SDPA_CAUSAL_TOP_LEFT ? "true" : "false", value_of(dtypes, s.dt[3]));
        printf(",\"k_dtype\":\"%s\",\"v_dtype\":\"%s\",\"page_size\":%lld,\"layout\":\"%s\"",
               value_of(kv_dtypes, s.dt[1]), value_of(kv_dtypes, s.dt[2]), (long long)s.page,
               s.layout == SC_BTHD ? "bthd" : s.layout == SC_PADDED ? "padded" : "bhtd");
        if (quantized(s.dt[1]) || quantized(s.dt[2]))
            printf(",\"kv_scale\":\"%s\",\"kv_group\":%lld,\"kv_scale_dtype\":\"%s\"",
                   value_of(kv_scales, s.qscale), (long long)s.qgroup,
                   value_of(scale_dtypes, s.qscale_dt));
        printf(",\"kv_code_bytes\":%.0f,\"kv_scale_bytes\":%.0f,\"kv_table_bytes\":%.0f",
               kvm.codes, kvm.scales, kvm.table);
        printf(",\"compute\":\"%s\"", s.compute == SDPA_COMPUTE_BF16 ? "bf16" : "f32");
        if (s.window)
            printf(",\"window_left\":%lld,\"window_right\":%lld", (long long)s.wl,
                   (long long)s.wr);
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
        if (op.check)
            printf(",\"check\":\"%s\",\"max_abs_err\":%.6g,\"max_rel_err\":%.6g,"
                   "\"bad\":%lld,\"checked\":%lld,\"check_ok\":%s",
                   e.full ? "whole" : "slice", err.max_abs, err.max_rel, (long long)err.bad,
                   (long long)err.checked, err.bad ? "false" : "true");
        if (op.mem)
            printf(",\"mem_fused_heap_bytes\":%lld,\"mem_fused_rss_kib\":%ld,"
                   "\"mem_reference_heap_bytes\":%lld,\"mem_reference_rss_kib\":%ld,"
                   "\"mem_reference_output_bytes\":%lld,"
                   "\"mem_reference_on\":\"%s\",\"score_matrix_mib\":%.6g",
                   mem_fused.heap_bytes, mem_fused.rss_kib, mem_ref.heap_bytes, mem_ref.rss_kib,
                   mem_ref.caller_bytes,
                   ref_whole ? "whole" : s.causal == SDPA_CAUSAL_TOP_LEFT
                                             ? "first rows of (b,h)=(0,0)"
                                             : "last rows of (b,h)=(0,0)",
                   score_mib);
        printf("}\n");
    } else {
        char desc[320];
        printf("libsdpa %s, isa %s, %d thread%s\n", sdpa_version(), isa_name, stats.threads,
               stats.threads == 1 ? "" : "s");
        printf("shape %s: %s, %.4g GFLOP\n", name, sb_case_str(&s, desc, sizeof desc),
               sb_flops(&s) * 1e-9);
        printf("fused: median %.4g ms of %lld (min %.4g, max %.4g): %.2f GFLOP/s, "
               "K/V read %.2f GB/s\n",
               med * 1e3, (long long)repeat, t[0] * 1e3, t[repeat - 1] * 1e3, gflops, kv_gbps);
        if (op.check)
            printf("check against sdpa_reference on the %s: max_abs_err %.3g, max_rel_err "
                   "%.3g, %lld of %lld outside |o - r| <= %g + %.3g |r|: %s\n",
                   scope, err.max_abs, err.max_rel, (long long)err.bad, (long long)err.checked,
                   err.abs_tol > 0 ? err.abs_tol : SC_TOL_ABS, sc_rel_tol(s.dt[3]),
                   err.bad ? "FAIL" : "ok");
        if (op.mem) {
            char ref_on[160] = "whole problem";
            if (!ref_whole)
                snprintf(ref_on, sizeof ref_on, "rows %lld-%lld of (b,h)=(0,0), and %lld B "
                         "of output the caller allocates", (long long)ref_piece.i0,
                         (long long)(ref_piece.i0 + ref_piece.rows - 1), mem_ref.caller_bytes);
            printf("memory of one call, peak above what was in use before it:\n"
                   "  fused      heap %12lld B   resident %+6ld KiB   (%d thread%s)\n"
                   "  reference  heap %12lld B   resident %+6ld KiB   (%s)\n"
                   "  heap: exact, the call's sdpa_stats.scratch_bytes; resident: VmHWM - "
                   "VmRSS,\n"
                   "  to ~128 KiB (page size, per-CPU counter batching). For scale, a "
                   "materialised\n  B*Hq*Tq*Tkv fp32 score matrix is %.1f MiB.\n",
                   mem_fused.heap_bytes, mem_fused.rss_kib, stats.threads,
                   stats.threads == 1 ? "" : "s", mem_ref.heap_bytes, mem_ref.rss_kib, ref_on,
                   score_mib);
            char b0[32], b1[32], b2[32];
            printf("  K/V cache  K %s, V %s, %s: %s", value_of(kv_dtypes, s.dt[1]),
                   s.v_in_k ? "a view of K" : value_of(kv_dtypes, s.dt[2]),
                   s.page > 0 ? "paged" : "contiguous", size_str(kvm.codes, b0, sizeof b0));
            if (kvm.scales > 0)
                printf(" + %s of %s scales", size_str(kvm.scales, b1, sizeof b1),
                       value_of(scale_dtypes, s.qscale_dt));
            if (s.page > 0)
                printf(" + a %s block table\n             (a pool of %lld %lld-token pages)",
                       size_str(kvm.table, b2, sizeof b2), (long long)p.desc.pages.num_pages,
                       (long long)s.page);
            if (s.page > 0 || s.dt[1] != SDPA_F32 || s.dt[2] != SDPA_F32)
                printf("; as contiguous fp32, %s", size_str(kvm.fp32, b0, sizeof b0));
            printf("\n");
        }
    }
    free(t);
    if (op.check)
        sb_expect_free(&e);
    sc_tensors_free(&p);
    free(kv_lens);
    return err.bad ? 1 : 0;
}
