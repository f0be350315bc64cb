/*
 * harness.c - counting, guarded buffers, case construction and the fused-vs-reference
 * comparison shared by every test file. See harness.h.
 */
#include "harness.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int th_passed, th_failed, th_verbose;
double th_worst_abs, th_worst_rel;
sdpa_isa th_isa = SDPA_ISA_SCALAR;

int th_check(int cond, const char *where, const char *fmt, ...) {
    if (cond) {
        th_passed++;
        return 1;
    }
    th_failed++;
    printf("FAIL %s: ", where);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    return 0;
}

uint64_t th_rand_u64(uint64_t *s) {
    /* splitmix64 (Steele, Lea, Flood 2014): tiny, full-period, good enough for test data */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float th_rand_float(uint64_t *s) {
    return (float)((double)(th_rand_u64(s) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

/* ---- guarded buffers ----------------------------------------------------------- */

typedef struct mapping {
    void *user, *base;
    size_t len;
} mapping;
static mapping maps[64];

void *th_alloc(size_t bytes, int guard) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    const size_t data = (bytes + pg - 1) / pg * pg;
    const size_t len = data + pg;
    char *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        perror("mmap");
        abort();
    }
    char *user;
    if (guard == TH_GUARD_BEFORE) {
        mprotect(base, pg, PROT_NONE);
        user = base + pg;
    } else {
        mprotect(base + data, pg, PROT_NONE);
        user = base + data - bytes;
    }
    for (size_t i = 0; i < sizeof maps / sizeof maps[0]; i++)
        if (!maps[i].user) {
            maps[i] = (mapping){user, base, len};
            return user;
        }
    fprintf(stderr, "th_alloc: too many live buffers\n");
    abort();
}

void th_free(void *p) {
    if (!p)
        return;
    for (size_t i = 0; i < sizeof maps / sizeof maps[0]; i++)
        if (maps[i].user == p) {
            munmap(maps[i].base, maps[i].len);
            maps[i].user = NULL;
            return;
        }
    fprintf(stderr, "th_free: unknown pointer\n");
    abort();
}

/* ---- cases --------------------------------------------------------------------- */

/* Bit pattern written into outputs before a call: a quiet NaN no computation yields, so
 * an element the call forgot stays visibly unwritten, and a gap it wrongly wrote shows. */
static const uint32_t SENTINEL = 0x7fc0deadu;

static int64_t max_offset(const sdpa_tensor *t, int64_t B, int64_t H, int64_t T, int64_t D) {
    return (B - 1) * t->stride_b + (H - 1) * t->stride_h + (T - 1) * t->stride_t + D - 1;
}

static sdpa_tensor make_view(int layout, int64_t H, int64_t T, int64_t D, int64_t B) {
    sdpa_tensor v;
    switch (layout) {
    case TH_BTHD:
        v = sdpa_tensor_bthd(NULL, SDPA_F32, H, T, D);
        break;
    case TH_PADDED: /* odd gaps between rows, heads and batch entries */
        v = (sdpa_tensor){.dtype = SDPA_F32, .stride_t = D + 3};
        v.stride_h = T * v.stride_t + 5;
        v.stride_b = H * v.stride_h + 7;
        break;
    default:
        v = sdpa_tensor_bhtd(NULL, SDPA_F32, H, T, D);
        break;
    }
    (void)B;
    return v;
}

float *th_at(const sdpa_tensor *t, int64_t b, int64_t h, int64_t i) {
    return (float *)t->data + b * t->stride_b + h * t->stride_h + i * t->stride_t;
}

void th_tensors_make(th_tensors *t, const th_case *c) {
    memset(t, 0, sizeof *t);
    t->desc = (sdpa_desc){.batch = c->B, .heads_q = c->Hq, .heads_kv = c->Hkv,
                          .len_q = c->Tq, .len_kv = c->Tkv, .dim_qk = c->Dk,
                          .dim_v = c->Dv, .scale = c->scale, .causal = c->causal,
                          .num_threads = c->threads, .isa = th_isa};
    sdpa_tensor *views[4] = {&t->q, &t->k, &t->v, &t->o};
    const int64_t H[4] = {c->Hq, c->Hkv, c->Hkv, c->Hq};
    const int64_t T[4] = {c->Tq, c->Tkv, c->Tkv, c->Tq};
    const int64_t D[4] = {c->Dk, c->Dk, c->Dv, c->Dv};
    uint64_t rng = c->seed;
    const float amp = c->amplitude != 0.0f ? c->amplitude : 1.0f;
    for (int i = 0; i < 4; i++) {
        *views[i] = make_view(c->layout, H[i], T[i], D[i], c->B);
        t->elems[i] = (size_t)max_offset(views[i], c->B, H[i], T[i], D[i]) + 1;
        const size_t shift = c->guard == TH_GUARD_BEFORE ? (size_t)c->misalign : 0;
        float *buf = th_alloc((t->elems[i] + shift) * sizeof(float), c->guard);
        t->bufs[i] = buf;
        views[i]->data = buf + shift;
        float *data = views[i]->data;
        if (i < 3) {
            for (size_t e = 0; e < t->elems[i]; e++)
                data[e] = amp * th_rand_float(&rng);
        } else {
            for (size_t e = 0; e < t->elems[i]; e++)
                memcpy(&data[e], &SENTINEL, sizeof SENTINEL);
        }
    }
    t->elems[4] = (size_t)(c->B * c->Hq * c->Tq);
    t->lse = th_alloc(t->elems[4] * sizeof(float), c->guard);
    t->bufs[4] = t->lse;
    for (size_t e = 0; e < t->elems[4]; e++)
        memcpy(&t->lse[e], &SENTINEL, sizeof SENTINEL);
}

void th_tensors_free(th_tensors *t) {
    for (int i = 0; i < 5; i++)
        th_free(t->bufs[i]);
    memset(t, 0, sizeof *t);
}

static int close_enough(float x, float r, double *abs_err, double *rel_err) {
    if (isnan(r))
        return isnan(x);
    if (isinf(r))
        return x == r;
    if (!isfinite(x))
        return 0;
    const double e = fabs((double)x - (double)r);
    const double rel = e / (fabs((double)r) > 1e-30 ? fabs((double)r) : 1e-30);
    if (e > *abs_err)
        *abs_err = e;
    if (fabs((double)r) > 1e-3 && rel > *rel_err)
        *rel_err = rel;
    return e <= 1e-5 + 1e-4 * fabs((double)r);
}

th_errors th_compare(const th_case *c, const th_tensors *a, const th_tensors *ref) {
    th_errors e = {0, 0, 0};
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < c->Tq; i++) {
                const float *x = th_at(&a->o, b, h, i), *r = th_at(&ref->o, b, h, i);
                for (int64_t d = 0; d < c->Dv; d++)
                    if (!close_enough(x[d], r[d], &e.max_abs, &e.max_rel))
                        e.bad++;
            }
    for (size_t i = 0; i < a->elems[4]; i++)
        if (!close_enough(a->lse[i], ref->lse[i], &e.max_abs, &e.max_rel))
            e.bad++;
    if (e.bad == 0 && e.max_abs > th_worst_abs) /* the summary reports passing cases */
        th_worst_abs = e.max_abs;
    if (e.bad == 0 && e.max_rel > th_worst_rel)
        th_worst_rel = e.max_rel;
    return e;
}

/* Elements of an output buffer that belong to no element of the view must still hold
 * the sentinel: the call wrote nothing outside the output. */
static int64_t gaps_written(const th_case *c, const th_tensors *t) {
    if (c->layout != TH_PADDED)
        return 0;
    char *mark = calloc(t->elems[3], 1);
    const float *base = t->o.data;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < c->Tq; i++) {
                const float *row = th_at(&t->o, b, h, i);
                memset(mark + (row - base), 1, (size_t)c->Dv);
            }
    int64_t bad = 0;
    for (size_t e = 0; e < t->elems[3]; e++)
        if (!mark[e] && memcmp(&base[e], &SENTINEL, sizeof SENTINEL) != 0)
            bad++;
    free(mark);
    return bad;
}

const char *th_case_str(const th_case *c, char *buf, size_t n) {
    static const char *layouts[] = {"bhtd", "bthd", "padded"};
    snprintf(buf, n,
             "isa=%s B=%lld Hq=%lld Hkv=%lld Tq=%lld Tkv=%lld Dk=%lld Dv=%lld causal=%d "
             "threads=%d layout=%s guard=%s misalign=%d scale=%g amp=%g seed=%llu",
             sdpa_isa_name(th_isa), (long long)c->B, (long long)c->Hq, (long long)c->Hkv,
             (long long)c->Tq, (long long)c->Tkv, (long long)c->Dk, (long long)c->Dv,
             c->causal, c->threads, layouts[c->layout],
             c->guard == TH_GUARD_BEFORE ? "before" : "after", c->misalign, (double)c->scale,
             (double)c->amplitude, (unsigned long long)c->seed);
    return buf;
}

int th_run_case(const th_case *c, const char *label) {
    return th_run_case_with(c, label, NULL, NULL, NULL);
}

int th_run_case_with(const th_case *c, const char *label, th_fill_fn fill, void *ctx,
                     th_tensors *keep) {
    th_tensors f, r;
    th_tensors_make(&f, c);
    th_tensors_make(&r, c);
    if (fill) {
        fill(&f, c, ctx);
        fill(&r, c, ctx);
    }
    char desc[256];
    const sdpa_status sf = sdpa_forward(&f.desc, &f.q, &f.k, &f.v, &f.o, f.lse);
    const sdpa_status sr = sdpa_reference(&r.desc, &r.q, &r.k, &r.v, &r.o, r.lse);
    int ok;
    if (sf != SDPA_OK || sr != SDPA_OK) {
        ok = th_check(0, "th_run_case", "%s [%s]: status fused=%s reference=%s", label,
                      th_case_str(c, desc, sizeof desc), sdpa_strerror(sf), sdpa_strerror(sr));
    } else {
        const th_errors e = th_compare(c, &f, &r);
        const int64_t gaps = gaps_written(c, &f);
        ok = th_check(e.bad == 0 && gaps == 0, "th_run_case",
                      "%s [%s]: max_abs=%.3g max_rel=%.3g bad=%lld gaps_written=%lld", label,
                      th_case_str(c, desc, sizeof desc), e.max_abs, e.max_rel,
                      (long long)e.bad, (long long)gaps);
        if (th_verbose)
            printf("  ok %s [%s] max_abs=%.3g max_rel=%.3g\n", label,
                   th_case_str(c, desc, sizeof desc), e.max_abs, e.max_rel);
    }
    if (keep)
        *keep = f;
    else
        th_tensors_free(&f);
    th_tensors_free(&r);
    return ok;
}

int th_nproc(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
