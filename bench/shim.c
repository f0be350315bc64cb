/*
 * shim.c - the plain-C side of the benchmark (see shim.h): the shape suite, problem
 * setup with every feature's data, flop/byte counts, calls into libsdpa and the check
 * against the reference (whole, or exact sub-problems), and the same for sdpa_linear.
 *
 * It holds no timing loop and no statistics (bench/bench.cc and tools/sdpa-run.c do
 * that) and calls only the public API, so what it measures is what a user gets.
 */
#include "shim.h"

#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The suite: issue 3's shapes (prefill-causal is the shape of DESIGN.md section 7's
 * "what we must beat" figures), issue 6's decode-long (K/V of 512 MiB, far beyond the
 * 32 MiB L3) and issue 7's f16 decode and sliding-window rows. causal-1k and window-8k
 * share long-causal's heads and dims: a window of 512 keys at T = 8192 does the work per
 * row of causal T = 1024 (512 keys on average) on 8x the rows, so its time should be
 * ~8x causal-1k's, far below long-causal's. */
const sb_shape sb_suite[] = {
    {.name = "prefill-causal", .B = 1, .Hq = 32, .Hkv = 32, .Tq = 2048, .Tkv = 2048, .Dk = 128,
     .Dv = 128, .causal = SDPA_CAUSAL_BOTTOM_RIGHT},
    {.name = "prefill", .B = 4, .Hq = 12, .Hkv = 12, .Tq = 512, .Tkv = 512, .Dk = 64, .Dv = 64},
    {.name = "decode-gqa", .B = 1, .Hq = 32, .Hkv = 8, .Tq = 1, .Tkv = 4096, .Dk = 128,
     .Dv = 128},
    {.name = "decode-long", .B = 1, .Hq = 32, .Hkv = 8, .Tq = 1, .Tkv = 65536, .Dk = 128,
     .Dv = 128},
    {.name = "decode-long-f16", .B = 1, .Hq = 32, .Hkv = 8, .Tq = 1, .Tkv = 65536, .Dk = 128,
     .Dv = 128, .dtype = SDPA_F16},
    {.name = "long-causal", .B = 1, .Hq = 8, .Hkv = 8, .Tq = 8192, .Tkv = 8192, .Dk = 128,
     .Dv = 128, .causal = SDPA_CAUSAL_BOTTOM_RIGHT},
    {.name = "causal-1k", .B = 1, .Hq = 8, .Hkv = 8, .Tq = 1024, .Tkv = 1024, .Dk = 128,
     .Dv = 128, .causal = SDPA_CAUSAL_BOTTOM_RIGHT},
    {.name = "window-8k", .B = 1, .Hq = 8, .Hkv = 8, .Tq = 8192, .Tkv = 8192, .Dk = 128,
     .Dv = 128, .causal = SDPA_CAUSAL_BOTTOM_RIGHT, .window = 1, .window_left = 511,
     .window_right = 0},
    {.name = "seed", .B = 2, .Hq = 2, .Hkv = 2, .Tq = 11, .Tkv = 11, .Dk = 4, .Dv = 4,
     .causal = SDPA_CAUSAL_BOTTOM_RIGHT},
};
const int sb_suite_len = (int)(sizeof sb_suite / sizeof sb_suite[0]);

const sb_shape *sb_find_shape(const char *name) {
    for (int i = 0; i < sb_suite_len; i++)
        if (strcmp(sb_suite[i].name, name) == 0)
            return &sb_suite[i];
    return NULL;
}

int sb_elem_size(sdpa_dtype t) { return t == SDPA_F32 ? 4 : 2; }

int64_t sb_kv_len(const sb_shape *s, int64_t b) { return s->kv_lens ? s->kv_lens[b] : s->Tkv; }

float sb_sink_logit(int64_t h) { return (float)(h % 4) - 1.0f; }

/* splitmix64 (Steele, Lea, Flood 2014): a counter-based generator, so element n's
 * value depends on n alone and the data is the same whatever fills it. */
static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Top 24 bits -> [0, 1) exactly. */
static float unit24(uint64_t u) { return (float)(u >> 40) * (1.0f / 16777216.0f); }

float sb_mask_value(const sb_shape *s, int64_t i, int64_t j) {
    const uint64_t u = splitmix64(((uint64_t)5 << 48) ^ (uint64_t)(i * s->Tkv + j));
    return u % 10 == 0 ? -INFINITY : unit24(u) - 0.5f;
}

/* ---- 16-bit storage: IEEE binary16 and bfloat16, round to nearest even ------------ */

static uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: a quiet one */
        return sign | 0x7e00u;
    if (ax >= 0x477ff000u) /* from 65520 = halfway above the largest f16 (65504): inf */
        return sign | 0x7c00u;
    if (ax < 0x38800000u) { /* below 2^-14: an f16 subnormal, in units of 2^-24 */
        float a;
        memcpy(&a, &ax, sizeof a);
        return sign | (uint16_t)nearbyintf(a * 16777216.0f); /* exact scaling, RNE */
    }
    uint32_t m = ax - (112u << 23); /* exponent bias 127 -> 15 */
    m += 0xfffu + ((m >> 13) & 1u); /* round the 13 dropped bits to nearest even */
    return sign | (uint16_t)(m >> 13);
}

static float f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) { /* zero or subnormal: m x 2^-24, exact in fp32 */
        const float f = (float)m * 0x1p-24f;
        return sign ? -f : f;
    }
    const uint32_t x = sign | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112u) << 23) | (m << 13));
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

static uint16_t f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u); /* NaN stays NaN (quiet) */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static float bf16_to_f32(uint16_t h) {
    const uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

static void store(void *base, sdpa_dtype t, size_t i, float f) {
    if (t == SDPA_F32)
        ((float *)base)[i] = f;
    else
        ((uint16_t *)base)[i] = t == SDPA_F16 ? f32_to_f16(f) : f32_to_bf16(f);
}

static float load(const void *base, sdpa_dtype t, size_t i) {
    if (t == SDPA_F32)
        return ((const float *)base)[i];
    const uint16_t h = ((const uint16_t *)base)[i];
    return t == SDPA_F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

/* ---- counts ------------------------------------------------------------------------ */

/* Keys [lo, hi) row i sees among tkv keys (sdpa.h's rule, an explicit mask aside);
 * hi == lo when none. */
static void row_range(const sb_shape *s, int64_t tkv, int64_t i, int64_t *lo, int64_t *hi) {
    const int64_t d = i + (s->causal == SDPA_CAUSAL_TOP_LEFT ? 0 : tkv - s->Tq);
    int64_t a = 0, e = tkv;
    if (s->causal != SDPA_CAUSAL_NONE && d + 1 < e)
        e = d + 1;
    if (s->window) { /* |d| and the extents stay far below 2^62: no overflow */
        if (d - s->window_left > a)
            a = d - s->window_left;
        if (d + s->window_right + 1 < e)
            e = d + s->window_right + 1;
    }
    *lo = a;
    *hi = e > a ? e : a;
}

/* Visible scores of rows [i0, i0 + rows) of one head of batch entry b, row by row. */
static double visible_rows(const sb_shape *s, int64_t b, int64_t i0, int64_t rows) {
    const int64_t tkv = sb_kv_len(s, b);
    if (s->causal == SDPA_CAUSAL_NONE && !s->window)
        return (double)rows * (double)tkv;
    double n = 0.0;
    for (int64_t i = i0; i < i0 + rows; i++) {
        int64_t lo, hi;
        row_range(s, tkv, i, &lo, &hi);
        n += (double)(hi - lo);
    }
    return n;
}

double sb_visible_scores(const sb_shape *s) {
    if (!s->kv_lens) /* every entry alike */
        return (double)s->B * (double)s->Hq * visible_rows(s, 0, 0, s->Tq);
    double n = 0.0;
    for (int64_t b = 0; b < s->B; b++)
        n += (double)s->Hq * visible_rows(s, b, 0, s->Tq);
    return n;
}

double sb_flops(const sb_shape *s) {
    return 2.0 * (double)(s->Dk + s->Dv) * sb_visible_scores(s);
}

double sb_kv_bytes(const sb_shape *s) {
    double rows = 0.0;
    for (int64_t b = 0; b < (s->kv_lens ? s->B : 1); b++) {
        /* lo and hi never decrease with i, so the keys some row sees are
         * [lo of the first row that sees any, hi of the last one) */
        const int64_t tkv = sb_kv_len(s, b);
        int64_t first = -1, last = -1;
        for (int64_t i = 0; i < s->Tq; i++) {
            int64_t lo, hi;
            row_range(s, tkv, i, &lo, &hi);
            if (hi > lo) {
                if (first < 0)
                    first = lo;
                last = hi;
            }
        }
        if (first >= 0)
            rows += (double)(last - first) * (s->kv_lens ? 1.0 : (double)s->B);
    }
    return rows * (double)s->Hkv * (double)(s->Dk + s->Dv) * (double)sb_elem_size(s->dtype);
}

/* Speculative decoding verifies up to ~16 tokens at once; beyond that it is prefill. */
int sb_is_decode(const sb_shape *s) { return s->Tq <= 16 && s->Tkv >= 64 * s->Tq; }

int sb_is_plain(const sb_shape *s) {
    return s->dtype == SDPA_F32 && s->causal != SDPA_CAUSAL_TOP_LEFT && !s->window &&
           s->softcap == 0.0f && !s->alibi && !s->sinks && s->mask == SDPA_MASK_NONE &&
           !s->kv_lens;
}

const char *sb_features_str(const sb_shape *s, char *buf, int n) {
    static const char *const dtypes[] = {"fp32", "f16", "bf16"};
    int len = snprintf(buf, (size_t)n, "%s", "");
    /* Each piece is appended while room is left; snprintf truncates the last one. */
#define ADD(...)                                                                     \
    do {                                                                             \
        if (len >= 0 && len < n)                                                     \
            len += snprintf(buf + len, (size_t)(n - len), __VA_ARGS__);              \
    } while (0)
    if (s->causal == SDPA_CAUSAL_TOP_LEFT)
        ADD(" (top-left)");
    if (s->dtype != SDPA_F32)
        ADD(", %s", dtypes[s->dtype]);
    if (s->window)
        ADD(", window (%lld,%lld)", (long long)s->window_left, (long long)s->window_right);
    if (s->softcap > 0.0f)
        ADD(", softcap %g", (double)s->softcap);
    if (s->alibi)
        ADD(", alibi");
    if (s->sinks)
        ADD(", sinks");
    if (s->mask != SDPA_MASK_NONE)
        ADD(", %s mask", s->mask == SDPA_MASK_BOOL ? "bool" : "float");
    if (s->kv_lens) {
        ADD(", kv_lens");
        for (int64_t b = 0; b < s->B; b++)
            ADD("%s%lld", b ? "," : " ", (long long)s->kv_lens[b]);
    }
#undef ADD
    return buf;
}

/* ---- problems ---------------------------------------------------------------------- */

static void fill(void *x, sdpa_dtype t, size_t n, uint64_t stream) {
    for (size_t i = 0; i < n; i++) /* [0, 1) -> [-1, 1), then rounded to the dtype */
        store(x, t, i, unit24(splitmix64((stream << 48) ^ i)) * 2.0f - 1.0f);
}

int sb_problem_init(sb_problem *p, const sb_shape *s) {
    memset(p, 0, sizeof *p);
    p->s = *s;
    /* Sizes from a command line can be anything: refuse, in floating point, what cannot
     * be allocated before an integer product can overflow. */
    const double largest = fmax(fmax((double)s->Hq * (double)s->Tq, (double)s->Hkv * (double)s->Tkv) *
                                    (double)s->B * (double)(s->Dk > s->Dv ? s->Dk : s->Dv),
                                s->mask ? (double)s->Tq * (double)s->Tkv : 0.0);
    if (largest * sizeof(float) > (double)(SIZE_MAX / 8))
        return -1;
    const sdpa_dtype t = s->dtype;
    const size_t es = (size_t)sb_elem_size(t);
    const size_t nq = (size_t)(s->B * s->Hq * s->Tq * s->Dk);
    const size_t nk = (size_t)(s->B * s->Hkv * s->Tkv * s->Dk);
    const size_t nv = (size_t)(s->B * s->Hkv * s->Tkv * s->Dv);
    const size_t no = (size_t)(s->B * s->Hq * s->Tq * s->Dv);
    p->q = malloc(nq * es);
    p->k = malloc(nk * es);
    p->v = malloc(nv * es);
    p->o = malloc(no * es);
    int ok = p->q && p->k && p->v && p->o;
    if (ok && s->mask != SDPA_MASK_NONE)
        ok = (p->mask = malloc((size_t)(s->Tq * s->Tkv) *
                               (s->mask == SDPA_MASK_BOOL ? 1 : sizeof(float)))) != NULL;
    if (ok && s->alibi)
        ok = (p->slopes = malloc((size_t)s->Hq * sizeof(float))) != NULL;
    if (ok && s->sinks)
        ok = (p->sinks = malloc((size_t)s->Hq * sizeof(float))) != NULL;
    if (!ok) {
        sb_problem_free(p);
        return -1;
    }
    fill(p->q, t, nq, 1);
    fill(p->k, t, nk, 2);
    fill(p->v, t, nv, 3);
    if (p->mask)
        for (int64_t i = 0; i < s->Tq; i++)
            for (int64_t j = 0; j < s->Tkv; j++) {
                const float m = sb_mask_value(s, i, j);
                if (s->mask == SDPA_MASK_BOOL)
                    ((uint8_t *)p->mask)[i * s->Tkv + j] = m != -INFINITY;
                else
                    ((float *)p->mask)[i * s->Tkv + j] = m;
            }
    if (p->slopes) /* the ALiBi paper's slopes for Hq heads */
        sdpa_alibi_slopes(s->Hq, 8.0f, p->slopes);
    for (int64_t h = 0; h < s->Hq && p->sinks; h++)
        p->sinks[h] = sb_sink_logit(h);
    /* Touch the output now, so its first-write page faults are not charged to whichever
     * variant runs first (nor to sdpa-run --mem's measurement). */
    memset(p->o, 0, no * es);
    p->tq = sdpa_tensor_bhtd(p->q, t, s->Hq, s->Tq, s->Dk);
    p->tk = sdpa_tensor_bhtd(p->k, t, s->Hkv, s->Tkv, s->Dk);
    p->tv = sdpa_tensor_bhtd(p->v, t, s->Hkv, s->Tkv, s->Dv);
    p->to = sdpa_tensor_bhtd(p->o, t, s->Hq, s->Tq, s->Dv);
    return 0;
}

void sb_problem_free(sb_problem *p) {
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->o);
    free(p->mask);
    free(p->slopes);
    free(p->sinks);
    memset(p, 0, sizeof *p);
}

sdpa_desc sb_desc(const sb_problem *p) {
    const sb_shape *s = &p->s;
    sdpa_desc d = {.batch = s->B, .heads_q = s->Hq, .heads_kv = s->Hkv, .len_q = s->Tq,
                   .len_kv = s->Tkv, .dim_qk = s->Dk, .dim_v = s->Dv, .causal = s->causal,
                   .window = s->window, .window_left = s->window_left,
                   .window_right = s->window_right, .softcap = s->softcap,
                   .alibi_slopes = p->slopes, .sinks = p->sinks, .kv_lens = s->kv_lens};
    if (p->mask) /* one [Tq, Tkv] matrix for every entry and head */
        d.mask = (sdpa_mask){.data = p->mask, .kind = s->mask, .dtype = SDPA_F32,
                             .stride_b = 0, .stride_h = 0, .stride_q = s->Tkv};
    return d;
}

sdpa_status sb_run_fused(const sb_problem *p, sdpa_isa isa, int threads, sdpa_stats *stats) {
    sdpa_desc d = sb_desc(p);
    d.isa = (int)isa;
    d.num_threads = threads;
    d.stats = stats;
    return sdpa_forward(&d, &p->tq, &p->tk, &p->tv, &p->to, NULL);
}

sdpa_status sb_run_reference(const sb_problem *p) {
    const sdpa_desc d = sb_desc(p);
    return sdpa_reference(&d, &p->tq, &p->tk, &p->tv, &p->to, NULL);
}

/* ---- the check ------------------------------------------------------------------- */

/* How a piece becomes a problem of its own (shim.h, sb_piece_exact): its causal mode and
 * its keys [0, *len_kv) (0: no row of the piece sees a key). Returns 0 if no exact one. */
static int piece_frame(const sb_shape *s, const sb_piece *pc, int *causal, int64_t *len_kv) {
    const int64_t tkv = sb_kv_len(s, pc->b);
    const int64_t off = s->causal == SDPA_CAUSAL_TOP_LEFT ? 0 : tkv - s->Tq;
    int64_t seen_hi = 0; /* keys the piece's rows see lie below this */
    for (int64_t i = pc->i0; i < pc->i0 + pc->rows; i++) {
        int64_t lo, hi;
        row_range(s, tkv, i, &lo, &hi);
        if (hi > lo && hi > seen_hi)
            seen_hi = hi;
    }
    *causal = SDPA_CAUSAL_NONE;
    *len_kv = 0;
    if (seen_hi == 0) /* the answer is zeros */
        return 1;
    if (s->causal == SDPA_CAUSAL_NONE && !s->window && !s->alibi) { /* d(i) unused */
        *len_kv = tkv;
        return 1;
    }
    if (s->causal == SDPA_CAUSAL_TOP_LEFT && pc->i0 == 0) { /* a top-left prefix */
        *causal = SDPA_CAUSAL_TOP_LEFT;
        *len_kv = tkv;
        return 1;
    }
    const int64_t end = pc->i0 + pc->rows + off; /* keeps d(i) under bottom-right */
    if (end < seen_hi || end > tkv)
        return 0;
    *causal = s->causal == SDPA_CAUSAL_NONE ? SDPA_CAUSAL_NONE : SDPA_CAUSAL_BOTTOM_RIGHT;
    *len_kv = end;
    return 1;
}

int sb_piece_exact(const sb_problem *p, const sb_piece *pc) {
    int causal;
    int64_t len_kv;
    return piece_frame(&p->s, pc, &causal, &len_kv);
}

sdpa_status sb_reference_piece(const sb_problem *p, const sb_piece *pc, float *out) {
    const sb_shape *s = &p->s;
    int causal;
    int64_t end;
    if (!piece_frame(s, pc, &causal, &end))
        return SDPA_ERR_BAD_ARGUMENT;
    if (end == 0) {
        memset(out, 0, (size_t)(pc->rows * s->Dv) * sizeof(float));
        return SDPA_OK;
    }
    const int64_t hk = pc->h / (s->Hq / s->Hkv);
    const size_t es = (size_t)sb_elem_size(s->dtype);
    const char *q = (const char *)p->q + (size_t)(((pc->b * s->Hq + pc->h) * s->Tq + pc->i0) * s->Dk) * es;
    const char *k = (const char *)p->k + (size_t)((pc->b * s->Hkv + hk) * s->Tkv * s->Dk) * es;
    const char *v = (const char *)p->v + (size_t)((pc->b * s->Hkv + hk) * s->Tkv * s->Dv) * es;
    sdpa_desc d = sb_desc(p);
    d.batch = 1;
    d.heads_q = d.heads_kv = 1;
    d.len_q = pc->rows;
    d.len_kv = end;
    d.causal = causal;
    d.kv_lens = NULL; /* end <= the entry's length */
    d.alibi_slopes = p->slopes ? p->slopes + pc->h : NULL;
    d.sinks = p->sinks ? p->sinks + pc->h : NULL;
    if (p->mask) /* rows i0.. of the [Tq, Tkv] matrix */
        d.mask.data = (const char *)p->mask +
                      (size_t)(pc->i0 * s->Tkv) * (s->mask == SDPA_MASK_BOOL ? 1 : sizeof(float));
    const sdpa_tensor tq = sdpa_tensor_bhtd(q, s->dtype, 1, pc->rows, s->Dk);
    const sdpa_tensor tk = sdpa_tensor_bhtd(k, s->dtype, 1, end, s->Dk);
    const sdpa_tensor tv = sdpa_tensor_bhtd(v, s->dtype, 1, end, s->Dv);
    const sdpa_tensor to = sdpa_tensor_bhtd(out, SDPA_F32, 1, pc->rows, s->Dv);
    return sdpa_reference(&d, &tq, &tk, &tv, &to, NULL);
}

/* The candidate pieces: the first, middle and last SB_SLICE_ROWS rows (one range when Tq
 * is short) of the first and the last (batch, head); those with an exact sub-problem
 * are kept. The last head reads the last K/V head, so a GQA mapping error shows; the
 * middle rows cross tile boundaries of every table; under causal the first rows see
 * few keys and the last rows all of them. */
static void choose_pieces(sb_expect *e, const sb_problem *p) {
    const sb_shape *s = &p->s;
    const int64_t R = SB_SLICE_ROWS;
    int64_t starts[3], nstarts = 0, rows;
    if (s->Tq <= 3 * R) {
        starts[nstarts++] = 0;
        rows = s->Tq;
    } else {
        starts[nstarts++] = 0;
        starts[nstarts++] = (s->Tq - R) / 2;
        starts[nstarts++] = s->Tq - R;
        rows = R;
    }
    const int64_t heads[2][2] = {{0, 0}, {s->B - 1, s->Hq - 1}};
    const int nheads = (s->B == 1 && s->Hq == 1) ? 1 : 2;
    e->npieces = e->dropped = 0;
    for (int hh = 0; hh < nheads; hh++)
        for (int64_t r = 0; r < nstarts; r++) {
            const sb_piece pc = {heads[hh][0], heads[hh][1], starts[r], rows};
            if (sb_piece_exact(p, &pc))
                e->piece[e->npieces++] = pc;
            else
                e->dropped++;
        }
}

sdpa_status sb_expect_make(sb_expect *e, const sb_problem *p) {
    const sb_shape *s = &p->s;
    memset(e, 0, sizeof *e);
    e->full = sb_flops(s) <= SB_FULL_CHECK_FLOPS;
    if (!e->full) {
        choose_pieces(e, p);
        e->full = e->npieces == 0; /* never so (shim.h), but then only the whole is exact */
    }
    size_t n = 0;
    if (e->full)
        n = (size_t)(s->B * s->Hq * s->Tq * s->Dv);
    for (int i = 0; i < e->npieces && !e->full; i++)
        n += (size_t)(e->piece[i].rows * s->Dv);
    e->ref = malloc(n * sizeof(float));
    if (!e->ref)
        return SDPA_ERR_OUT_OF_MEMORY;
    const double t0 = sb_now();
    sdpa_status st = SDPA_OK;
    if (e->full) {
        e->npieces = e->dropped = 0;
        const sdpa_desc d = sb_desc(p);
        const sdpa_tensor to = sdpa_tensor_bhtd(e->ref, SDPA_F32, s->Hq, s->Tq, s->Dv);
        st = sdpa_reference(&d, &p->tq, &p->tk, &p->tv, &to, NULL);
        e->flops = sb_flops(s);
    } else {
        float *out = e->ref;
        for (int i = 0; i < e->npieces && st == SDPA_OK; i++) {
            st = sb_reference_piece(p, &e->piece[i], out);
            out += e->piece[i].rows * s->Dv;
            e->flops += 2.0 * (double)(s->Dk + s->Dv) *
                        visible_rows(s, e->piece[i].b, e->piece[i].i0, e->piece[i].rows);
        }
    }
    e->seconds = sb_now() - t0;
    if (st != SDPA_OK)
        sb_expect_free(e);
    return st;
}

void sb_expect_free(sb_expect *e) {
    free(e->ref);
    e->ref = NULL;
}

const char *sb_expect_scope(const sb_expect *e, const sb_shape *s, char *buf, int n) {
    if (e->full) {
        snprintf(buf, (size_t)n, "whole output");
        return buf;
    }
    /* Pieces come in (b, h) groups (choose_pieces). When every group has the same row
     * ranges: "rows A-B, C-D of (b,h) = (0,0), (0,31)"; else each group with its own. */
    int ngroups = 0, group_start[SB_MAX_PIECES + 1];
    for (int i = 0; i < e->npieces; i++)
        if (i == 0 || e->piece[i].b != e->piece[i - 1].b || e->piece[i].h != e->piece[i - 1].h)
            group_start[ngroups++] = i;
    group_start[ngroups] = e->npieces;
    int same = 1;
    for (int g = 1; g < ngroups && same; g++) {
        const int len = group_start[g + 1] - group_start[g];
        same = len == group_start[1] - group_start[0];
        for (int i = 0; i < len && same; i++)
            same = e->piece[group_start[g] + i].i0 == e->piece[i].i0 &&
                   e->piece[group_start[g] + i].rows == e->piece[i].rows;
    }
    int len = snprintf(buf, (size_t)n, "slice:");
    for (int g = 0; g < ngroups && len < n; g++) {
        if (g == 0 || !same) {
            len += snprintf(buf + len, (size_t)(n - len), "%s rows", g ? ";" : "");
            for (int i = group_start[g]; i < group_start[g + 1] && len < n; i++)
                len += snprintf(buf + len, (size_t)(n - len), "%s %lld-%lld",
                                i > group_start[g] ? "," : "", (long long)e->piece[i].i0,
                                (long long)(e->piece[i].i0 + e->piece[i].rows - 1));
        }
        if (len < n)
            len += snprintf(buf + len, (size_t)(n - len), "%s(%lld,%lld)",
                            !same || g == 0 ? " of (b,h) = " : ", ",
                            (long long)e->piece[group_start[g]].b,
                            (long long)e->piece[group_start[g]].h);
    }
    if (e->dropped && len < n)
        snprintf(buf + len, (size_t)(n - len),
                 " (%d more row range%s not checked: no exact sub-problem, %s)", e->dropped,
                 e->dropped == 1 ? "" : "s",
                 s->causal == SDPA_CAUSAL_TOP_LEFT
                     ? "top-left rows at or beyond Tkv keep their diagonal only in the "
                       "whole problem"
                     : "without causal, a window reaching right of the diagonal or ALiBi "
                       "makes only the last rows exact");
    return buf;
}

double sb_rel_tol(sdpa_dtype t) {
    return 1e-4 + (t == SDPA_F16 ? 0x1p-10 : t == SDPA_BF16 ? 0x1p-7 : 0.0);
}

/* The tolerance of DESIGN.md section 6, widened by a 16-bit output's rounding. */
static void compare_row(const void *o, sdpa_dtype t, size_t at, const float *r, int64_t n,
                        double rel, sb_error *err) {
    for (int64_t d = 0; d < n; d++) {
        const double x = (double)load(o, t, at + (size_t)d);
        const double ad = fabs(x - (double)r[d]), ar = fabs((double)r[d]);
        err->checked++;
        if (!(ad <= 1e-5 + rel * ar)) { /* also catches NaN */
            err->bad++;
            if (!isfinite(ad))
                continue;
        }
        if (ad > err->max_abs)
            err->max_abs = ad;
        if (ar > 1e-3 && ad / ar > err->max_rel)
            err->max_rel = ad / ar;
    }
}

sb_error sb_compare(const sb_expect *e, const sb_problem *p) {
    const sb_shape *s = &p->s;
    const double rel = sb_rel_tol(s->dtype);
    sb_error err = {0, 0, 0, 0};
    if (e->full) {
        compare_row(p->o, s->dtype, 0, e->ref, s->B * s->Hq * s->Tq * s->Dv, rel, &err);
        return err;
    }
    const float *r = e->ref;
    for (int i = 0; i < e->npieces; i++) {
        const sb_piece *pc = &e->piece[i];
        for (int64_t row = 0; row < pc->rows; row++, r += s->Dv)
            compare_row(p->o, s->dtype,
                        (size_t)(((pc->b * s->Hq + pc->h) * s->Tq + pc->i0 + row) * s->Dv), r,
                        s->Dv, rel, &err);
    }
    return err;
}

/* ---- the projection GEMM --------------------------------------------------------- */

const sb_linear_shape sb_linear_suite[] = {
    {"linear", 2048, 4096, 4096, 1},
};
const int sb_linear_suite_len = (int)(sizeof sb_linear_suite / sizeof sb_linear_suite[0]);

int sb_linear_init(sb_linear *l, const sb_linear_shape *s) {
    memset(l, 0, sizeof *l);
    l->s = *s;
    l->x = malloc((size_t)(s->M * s->K) * sizeof(float));
    l->w = malloc((size_t)(s->N * s->K) * sizeof(float));
    l->b = s->bias ? malloc((size_t)s->N * sizeof(float)) : NULL;
    l->y = malloc((size_t)(s->M * s->N) * sizeof(float));
    if (!l->x || !l->w || !l->y || (s->bias && !l->b)) {
        sb_linear_free(l);
        return -1;
    }
    fill(l->x, SDPA_F32, (size_t)(s->M * s->K), 6);
    fill(l->w, SDPA_F32, (size_t)(s->N * s->K), 7);
    if (l->b)
        fill(l->b, SDPA_F32, (size_t)s->N, 8);
    memset(l->y, 0, (size_t)(s->M * s->N) * sizeof(float)); /* first-touch faults now */
    return 0;
}

void sb_linear_free(sb_linear *l) {
    free(l->x);
    free(l->w);
    free(l->b);
    free(l->y);
    memset(l, 0, sizeof *l);
}

double sb_linear_flops(const sb_linear_shape *s) {
    return 2.0 * (double)s->M * (double)s->K * (double)s->N;
}

sdpa_status sb_run_linear(const sb_linear *l, sdpa_isa isa, int threads) {
    const sdpa_linear_desc d = {.rows = l->s.M, .in_features = l->s.K, .out_features = l->s.N,
                                .weight = l->w, .bias = l->b, .num_threads = threads,
                                .isa = (int)isa};
    return sdpa_linear(&d, l->x, l->y);
}

static void check_linear_elem(const sb_linear *l, int64_t r, int64_t c, sb_error *err) {
    const int64_t K = l->s.K;
    double exact = l->b ? (double)l->b[c] : 0.0, mag = fabs(exact);
    for (int64_t k = 0; k < K; k++) {
        const double t = (double)l->x[r * K + k] * (double)l->w[c * K + k];
        exact += t;
        mag += fabs(t);
    }
    const double got = (double)l->y[r * l->s.N + c], ad = fabs(got - exact);
    err->checked++;
    if (!(ad <= (double)(K + 3) * 0x1p-24 * mag + 1e-30)) {
        err->bad++;
        if (!isfinite(ad))
            return;
    }
    if (ad > err->max_abs)
        err->max_abs = ad;
    if (fabs(exact) > 1e-3 && ad / fabs(exact) > err->max_rel)
        err->max_rel = ad / fabs(exact);
}

sb_error sb_linear_check(const sb_linear *l) {
    const int64_t M = l->s.M, N = l->s.N;
    const int64_t rows[3] = {0, M / 2, M - 1}, cols[3] = {0, N / 2, N - 1};
    sb_error err = {0, 0, 0, 0};
    for (int i = 0; i < 3; i++)
        for (int64_t c = 0; c < N; c++)
            check_linear_elem(l, rows[i], c, &err);
    for (int j = 0; j < 3; j++)
        for (int64_t r = 0; r < M; r++)
            check_linear_elem(l, r, cols[j], &err);
    return err;
}

/* ---- clocks and cores ------------------------------------------------------------ */

double sb_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int sb_nproc(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
