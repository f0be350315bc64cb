/*
 * shim.c - the plain-C side of the benchmark (see shim.h): the shape suite, problem
 * setup, flop/byte counts, calls into libsdpa and the check against the reference.
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

/* Issue 3's suite: (B, Hq, Hkv, Tq, Tkv, Dk, Dv, causal). prefill-causal is the shape
 * of DESIGN.md section 7's "what we must beat" figures. */
const sb_shape sb_suite[] = {
    {"prefill-causal", 1, 32, 32, 2048, 2048, 128, 128, SDPA_CAUSAL_BOTTOM_RIGHT},
    {"prefill", 4, 12, 12, 512, 512, 64, 64, SDPA_CAUSAL_NONE},
    {"decode-gqa", 1, 32, 8, 1, 4096, 128, 128, SDPA_CAUSAL_NONE},
    {"long-causal", 1, 8, 8, 8192, 8192, 128, 128, SDPA_CAUSAL_BOTTOM_RIGHT},
    {"seed", 2, 2, 2, 11, 11, 4, 4, SDPA_CAUSAL_BOTTOM_RIGHT},
};
const int sb_suite_len = (int)(sizeof sb_suite / sizeof sb_suite[0]);

const sb_shape *sb_find_shape(const char *name) {
    for (int i = 0; i < sb_suite_len; i++)
        if (strcmp(sb_suite[i].name, name) == 0)
            return &sb_suite[i];
    return NULL;
}

/* Keys query row i sees: the bottom-right causal rule of sdpa.h. */
static int64_t row_end(const sb_shape *s, int64_t i) {
    if (s->causal == SDPA_CAUSAL_NONE)
        return s->Tkv;
    const int64_t e = i + (s->Tkv - s->Tq) + 1;
    return e < 0 ? 0 : (e > s->Tkv ? s->Tkv : e);
}

/* Visible scores of rows [i0, i0 + rows) of one head. Under causal, row_end grows by
 * one per row once positive and never reaches past Tkv (the last row sees exactly Tkv),
 * so the sum is an arithmetic series over the rows that see anything. */
static double visible_rows(const sb_shape *s, int64_t i0, int64_t rows) {
    if (s->causal == SDPA_CAUSAL_NONE)
        return (double)rows * (double)s->Tkv;
    const int64_t first_seeing = s->Tq - s->Tkv > 0 ? s->Tq - s->Tkv : 0;
    const int64_t a = i0 > first_seeing ? i0 : first_seeing, z = i0 + rows;
    if (a >= z)
        return 0.0;
    return (double)(z - a) * ((double)row_end(s, a) + (double)row_end(s, z - 1)) / 2.0;
}

double sb_visible_scores(const sb_shape *s) {
    return (double)s->B * (double)s->Hq * visible_rows(s, 0, s->Tq);
}

double sb_flops(const sb_shape *s) {
    return 2.0 * (double)(s->Dk + s->Dv) * sb_visible_scores(s);
}

double sb_kv_bytes(const sb_shape *s) {
    return (double)s->B * (double)s->Hkv * (double)s->Tkv * (double)(s->Dk + s->Dv) *
           (double)sizeof(float);
}

/* Speculative decoding verifies up to ~16 tokens at once; beyond that it is prefill. */
int sb_is_decode(const sb_shape *s) { return s->Tq <= 16 && s->Tkv >= 64 * s->Tq; }

/* splitmix64 (Steele, Lea, Flood 2014): a counter-based generator, so element n's
 * value depends on n alone and the data is the same whatever fills it. */
static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void fill(float *x, size_t n, uint64_t stream) {
    for (size_t i = 0; i < n; i++) /* top 24 bits -> [0, 1) exactly, then [-1, 1) */
        x[i] = (float)(splitmix64((stream << 48) ^ i) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

int sb_problem_init(sb_problem *p, const sb_shape *s) {
    memset(p, 0, sizeof *p);
    p->s = *s;
    /* Sizes from a command line can be anything: refuse, in floating point, what cannot
     * be allocated before an integer product can overflow. */
    const double largest = fmax((double)s->Hq * (double)s->Tq, (double)s->Hkv * (double)s->Tkv) *
                           (double)s->B * (double)(s->Dk > s->Dv ? s->Dk : s->Dv);
    if (largest * sizeof(float) > (double)(SIZE_MAX / 8))
        return -1;
    const size_t nq = (size_t)(s->B * s->Hq * s->Tq * s->Dk);
    const size_t nk = (size_t)(s->B * s->Hkv * s->Tkv * s->Dk);
    const size_t nv = (size_t)(s->B * s->Hkv * s->Tkv * s->Dv);
    const size_t no = (size_t)(s->B * s->Hq * s->Tq * s->Dv);
    p->q = malloc(nq * sizeof(float));
    p->k = malloc(nk * sizeof(float));
    p->v = malloc(nv * sizeof(float));
    p->o = malloc(no * sizeof(float));
    if (!p->q || !p->k || !p->v || !p->o) {
        sb_problem_free(p);
        return -1;
    }
    fill(p->q, nq, 1);
    fill(p->k, nk, 2);
    fill(p->v, nv, 3);
    /* Touch the output now, so its first-write page faults are not charged to whichever
     * variant runs first (nor to sdpa-run --mem's measurement). */
    memset(p->o, 0, no * sizeof(float));
    p->tq = sdpa_tensor_bhtd(p->q, SDPA_F32, s->Hq, s->Tq, s->Dk);
    p->tk = sdpa_tensor_bhtd(p->k, SDPA_F32, s->Hkv, s->Tkv, s->Dk);
    p->tv = sdpa_tensor_bhtd(p->v, SDPA_F32, s->Hkv, s->Tkv, s->Dv);
    p->to = sdpa_tensor_bhtd(p->o, SDPA_F32, s->Hq, s->Tq, s->Dv);
    return 0;
}

void sb_problem_free(sb_problem *p) {
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->o);
    memset(p, 0, sizeof *p);
}

static sdpa_desc desc_of(const sb_shape *s) {
    sdpa_desc d = {.batch = s->B, .heads_q = s->Hq, .heads_kv = s->Hkv, .len_q = s->Tq,
                   .len_kv = s->Tkv, .dim_qk = s->Dk, .dim_v = s->Dv, .causal = s->causal};
    return d;
}

sdpa_status sb_run_fused(const sb_problem *p, sdpa_isa isa, int threads, sdpa_stats *stats) {
    sdpa_desc d = desc_of(&p->s);
    d.isa = (int)isa;
    d.num_threads = threads;
    d.stats = stats;
    return sdpa_forward(&d, &p->tq, &p->tk, &p->tv, &p->to, NULL);
}

sdpa_status sb_run_reference(const sb_problem *p) {
    const sdpa_desc d = desc_of(&p->s);
    return sdpa_reference(&d, &p->tq, &p->tk, &p->tv, &p->to, NULL);
}

/* ---- the check ------------------------------------------------------------------- */

/* The pieces: the first, middle and last SB_SLICE_ROWS rows (one range when Tq is
 * short) of the first and the last (batch, head). The last head reads the last K/V head,
 * so a GQA mapping error shows; the middle rows cross tile boundaries of every table;
 * under causal the first rows see few keys and the last rows all of them. */
static void choose_pieces(sb_expect *e, const sb_shape *s) {
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
    e->npieces = 0;
    for (int hh = 0; hh < nheads; hh++)
        for (int64_t r = 0; r < nstarts; r++) {
            sb_piece pc = {heads[hh][0], heads[hh][1], starts[r], rows};
            e->piece[e->npieces++] = pc;
        }
}

/* Bottom-right alignment makes the piece an exact problem of its own: with Tq' = rows
 * and Tkv' = end, row r sees keys up to r + (end - rows) = i0 + r + (Tkv - Tq), what row
 * i0 + r sees in the whole problem. */
sdpa_status sb_reference_piece(const sb_problem *p, const sb_piece *pc, float *out) {
    const sb_shape *s = &p->s;
    const int64_t end = row_end(s, pc->i0 + pc->rows - 1);
    if (end == 0) { /* no row of the piece sees a key: the answer is zeros */
        memset(out, 0, (size_t)(pc->rows * s->Dv) * sizeof(float));
        return SDPA_OK;
    }
    const int64_t hk = pc->h / (s->Hq / s->Hkv);
    const float *q = p->q + ((pc->b * s->Hq + pc->h) * s->Tq + pc->i0) * s->Dk;
    const float *k = p->k + (pc->b * s->Hkv + hk) * s->Tkv * s->Dk;
    const float *v = p->v + (pc->b * s->Hkv + hk) * s->Tkv * s->Dv;
    const sdpa_desc d = {.batch = 1, .heads_q = 1, .heads_kv = 1, .len_q = pc->rows,
                         .len_kv = end, .dim_qk = s->Dk, .dim_v = s->Dv,
                         .causal = s->causal};
    const sdpa_tensor tq = sdpa_tensor_bhtd(q, SDPA_F32, 1, pc->rows, s->Dk);
    const sdpa_tensor tk = sdpa_tensor_bhtd(k, SDPA_F32, 1, end, s->Dk);
    const sdpa_tensor tv = sdpa_tensor_bhtd(v, SDPA_F32, 1, end, s->Dv);
    const sdpa_tensor to = sdpa_tensor_bhtd(out, SDPA_F32, 1, pc->rows, s->Dv);
    return sdpa_reference(&d, &tq, &tk, &tv, &to, NULL);
}

sdpa_status sb_expect_make(sb_expect *e, const sb_problem *p) {
    const sb_shape *s = &p->s;
    memset(e, 0, sizeof *e);
    e->full = sb_flops(s) <= SB_FULL_CHECK_FLOPS;
    size_t n;
    if (e->full) {
        n = (size_t)(s->B * s->Hq * s->Tq * s->Dv);
    } else {
        choose_pieces(e, s);
        n = 0;
        for (int i = 0; i < e->npieces; i++)
            n += (size_t)(e->piece[i].rows * s->Dv);
    }
    e->ref = malloc(n * sizeof(float));
    if (!e->ref)
        return SDPA_ERR_OUT_OF_MEMORY;
    const double t0 = sb_now();
    sdpa_status st = SDPA_OK;
    if (e->full) {
        const sdpa_desc d = desc_of(s);
        const sdpa_tensor to = sdpa_tensor_bhtd(e->ref, SDPA_F32, s->Hq, s->Tq, s->Dv);
        st = sdpa_reference(&d, &p->tq, &p->tk, &p->tv, &to, NULL);
        e->flops = sb_flops(s);
    } else {
        float *out = e->ref;
        for (int i = 0; i < e->npieces && st == SDPA_OK; i++) {
            st = sb_reference_piece(p, &e->piece[i], out);
            out += e->piece[i].rows * s->Dv;
            e->flops += 2.0 * (double)(s->Dk + s->Dv) *
                        visible_rows(s, e->piece[i].i0, e->piece[i].rows);
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

const char *sb_expect_scope(const sb_expect *e, char *buf, int n) {
    if (e->full) {
        snprintf(buf, (size_t)n, "whole output");
        return buf;
    }
    /* Pieces come as head-major groups of the same row ranges (choose_pieces). */
    int len = snprintf(buf, (size_t)n, "slice: rows");
    const int64_t h0b = e->piece[0].b, h0h = e->piece[0].h;
    int per_head = 0;
    while (per_head < e->npieces && e->piece[per_head].b == h0b && e->piece[per_head].h == h0h)
        per_head++;
    for (int i = 0; i < per_head && len < n; i++)
        len += snprintf(buf + len, (size_t)(n - len), "%s %lld-%lld", i ? "," : "",
                        (long long)e->piece[i].i0,
                        (long long)(e->piece[i].i0 + e->piece[i].rows - 1));
    for (int i = 0; i < e->npieces && len < n; i += per_head)
        len += snprintf(buf + len, (size_t)(n - len), "%s(%lld,%lld)", i ? ", " : " of (b,h) = ",
                        (long long)e->piece[i].b, (long long)e->piece[i].h);
    return buf;
}

/* The tolerance of DESIGN.md section 6. */
static void compare_row(const float *x, const float *r, int64_t n, sb_error *err) {
    for (int64_t d = 0; d < n; d++) {
        const double ad = fabs((double)x[d] - (double)r[d]), ar = fabs((double)r[d]);
        err->checked++;
        if (!(ad <= 1e-5 + 1e-4 * ar)) { /* also catches NaN */
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
    sb_error err = {0, 0, 0, 0};
    if (e->full) {
        compare_row(p->o, e->ref, s->B * s->Hq * s->Tq * s->Dv, &err);
        return err;
    }
    const float *r = e->ref;
    for (int i = 0; i < e->npieces; i++) {
        const sb_piece *pc = &e->piece[i];
        for (int64_t row = 0; row < pc->rows; row++, r += s->Dv)
            compare_row(p->o + ((pc->b * s->Hq + pc->h) * s->Tq + pc->i0 + row) * s->Dv, r,
                        s->Dv, &err);
    }
    return err;
}

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
