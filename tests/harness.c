/*
 * harness.c - counting, guarded buffers, case construction and the fused-vs-reference
 * comparison shared by every test file. See harness.h.
 */
#include "harness.h"

#include "../kernels/convert.h"
#include "oracle.h"

#include <math.h>
#include <pthread.h>
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
/* th_alloc/th_free are called from concurrent host threads by the threading tests */
static pthread_mutex_t maps_lock = PTHREAD_MUTEX_INITIALIZER;

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
    pthread_mutex_lock(&maps_lock);
    for (size_t i = 0; i < sizeof maps / sizeof maps[0]; i++)
        if (!maps[i].user) {
            maps[i] = (mapping){user, base, len};
            pthread_mutex_unlock(&maps_lock);
            return user;
        }
    fprintf(stderr, "th_alloc: too many live buffers\n");
    abort();
}

void th_free(void *p) {
    if (!p)
        return;
    pthread_mutex_lock(&maps_lock);
    for (size_t i = 0; i < sizeof maps / sizeof maps[0]; i++)
        if (maps[i].user == p) {
            munmap(maps[i].base, maps[i].len);
            maps[i].user = NULL;
            pthread_mutex_unlock(&maps_lock);
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

static size_t dt_bytes(sdpa_dtype t) { return t == SDPA_F32 ? 4 : 2; }

static sdpa_tensor make_view(int layout, sdpa_dtype dt, int64_t H, int64_t T, int64_t D) {
    sdpa_tensor v;
    switch (layout) {
    case TH_BTHD:
        v = sdpa_tensor_bthd(NULL, dt, H, T, D);
        break;
    case TH_PADDED: /* odd gaps between rows, heads and batch entries */
        v = (sdpa_tensor){.dtype = dt, .stride_t = D + 3};
        v.stride_h = T * v.stride_t + 5;
        v.stride_b = H * v.stride_h + 7;
        break;
    default:
        v = sdpa_tensor_bhtd(NULL, dt, H, T, D);
        break;
    }
    return v;
}

float *th_at(const sdpa_tensor *t, int64_t b, int64_t h, int64_t i) {
    return (float *)t->data + b * t->stride_b + h * t->stride_h + i * t->stride_t;
}

float th_get(const sdpa_tensor *t, int64_t b, int64_t h, int64_t i, int64_t d) {
    const int64_t e = b * t->stride_b + h * t->stride_h + i * t->stride_t + d;
    switch (t->dtype) {
    case SDPA_F16:
        return sdpa_f16_to_f32(((const uint16_t *)t->data)[e]);
    case SDPA_BF16:
        return sdpa_bf16_to_f32(((const uint16_t *)t->data)[e]);
    case SDPA_F32:
        break;
    }
    return ((const float *)t->data)[e];
}

/* Store x in element e of a buffer of dtype dt (rounded to nearest even). */
static void put(void *buf, size_t e, sdpa_dtype dt, float x) {
    if (dt == SDPA_F16)
        ((uint16_t *)buf)[e] = sdpa_f32_to_f16(x);
    else if (dt == SDPA_BF16)
        ((uint16_t *)buf)[e] = sdpa_f32_to_bf16(x);
    else
        ((float *)buf)[e] = x;
}

/* Sequence lengths of a case (drawn from their own generator, so both tensor sets get
 * the same): *tq_view / *tkv_view are the views' rows. */
static void make_lengths(th_tensors *t, const th_case *c, int64_t *tq_view, int64_t *tkv_view) {
    uint64_t rng = c->seed ^ 0x1e9e3779u;
    *tq_view = c->Tq;
    *tkv_view = c->Tkv;
    if (c->lens == TH_LENS_NONE)
        return;
    int64_t *ql = malloc((size_t)c->B * sizeof(int64_t)), *kl = malloc((size_t)c->B * sizeof(int64_t));
    for (int64_t b = 0; b < c->B; b++) {
        /* entry 0 full, entry 1 with no keys, the rest anywhere in [0, T] */
        ql[b] = b == 0 ? c->Tq : (int64_t)(th_rand_u64(&rng) % (uint64_t)(c->Tq + 1));
        kl[b] = b == 0 ? c->Tkv : b == 1 ? 0 : (int64_t)(th_rand_u64(&rng) % (uint64_t)(c->Tkv + 1));
        if (b >= 2 && b % 2 == 0) /* and some with the full query length */
            ql[b] = c->Tq;
    }
    if (c->lens == TH_LENS_VARLEN) {
        t->cuq = malloc((size_t)(c->B + 1) * sizeof(int64_t));
        t->cukv = malloc((size_t)(c->B + 1) * sizeof(int64_t));
        t->cuq[0] = t->cukv[0] = 0;
        for (int64_t b = 0; b < c->B; b++) {
            t->cuq[b + 1] = t->cuq[b] + ql[b];
            t->cukv[b + 1] = t->cukv[b] + kl[b];
        }
        /* a few rows and keys that no sequence owns */
        *tq_view = t->cuq[c->B] + 3;
        *tkv_view = t->cukv[c->B] + 2;
        free(ql);
        free(kl);
        t->desc.cu_seqlens_q = t->cuq;
        t->desc.cu_seqlens_kv = t->cukv;
        return;
    }
    if (c->lens == TH_LENS_PADDED) {
        t->qlens = ql;
        t->desc.q_lens = ql;
    } else {
        free(ql);
    }
    t->kvlens = kl;
    t->desc.kv_lens = kl;
}

/* The mask of a case: [B or 1, Hq or 1, Tq or 1, Tkv] with padded rows. */
static void make_mask(th_tensors *t, const th_case *c) {
    if (c->mask == SDPA_MASK_NONE)
        return;
    uint64_t rng = c->seed ^ 0x3a5c0ffeu;
    const int isbool = c->mask == SDPA_MASK_BOOL;
    const sdpa_dtype dt = isbool ? SDPA_F32 : c->mask_dt;
    const size_t es = isbool ? 1 : dt_bytes(dt);
    const int64_t rows = (c->mask_bcast & TH_BCAST_ROWS) ? 1 : c->Tq;
    const int64_t heads = (c->mask_bcast & TH_BCAST_H) ? 1 : c->Hq;
    const int64_t bs = (c->mask_bcast & TH_BCAST_B) ? 1 : c->B;
    sdpa_mask m = {.kind = c->mask, .dtype = isbool ? SDPA_F32 : dt};
    m.stride_q = (c->mask_bcast & TH_BCAST_ROWS) ? 0 : c->Tkv + 3;
    m.stride_h = (c->mask_bcast & TH_BCAST_H) ? 0 : rows * (c->Tkv + 3);
    m.stride_b = (c->mask_bcast & TH_BCAST_B) ? 0 : heads * rows * (c->Tkv + 3);
    const size_t n = (size_t)(bs * heads * rows * (c->Tkv + 3));
    t->mask = th_alloc(n * es, TH_GUARD_AFTER);
    for (int64_t b = 0; b < bs; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < rows; i++)
                for (int64_t j = 0; j < c->Tkv + 3; j++) {
                    const size_t e = (size_t)(b * m.stride_b + h * m.stride_h + i * m.stride_q + j);
                    const int hide = i == 3 || (double)(th_rand_u64(&rng) >> 11) * 0x1p-53 <
                                                   (double)c->mask_hidden;
                    if (isbool)
                        ((uint8_t *)t->mask)[e] = hide ? 0 : (uint8_t)(1 + (j % 7));
                    else
                        put(t->mask, e, dt, hide ? -INFINITY : 2.0f * th_rand_float(&rng));
                }
    m.data = t->mask;
    t->desc.mask = m;
}

void th_tensors_make(th_tensors *t, const th_case *c) {
    memset(t, 0, sizeof *t);
    t->desc = (sdpa_desc){.batch = c->B, .heads_q = c->Hq, .heads_kv = c->Hkv,
                          .len_q = c->Tq, .len_kv = c->Tkv, .dim_qk = c->Dk,
                          .dim_v = c->Dv, .scale = c->scale, .causal = c->causal,
                          .num_threads = c->threads, .isa = th_isa, .window = c->window,
                          .window_left = c->wl, .window_right = c->wr,
                          .softcap = c->softcap, .dropout_p = c->dropout,
                          .dropout_seed = c->seed * 0x9e3779b97f4a7c15ull};
    int64_t Tq, Tkv;
    make_lengths(t, c, &Tq, &Tkv);
    t->desc.len_q = Tq;
    t->desc.len_kv = Tkv;
    t->VB = c->lens == TH_LENS_VARLEN ? 1 : c->B;
    make_mask(t, c);
    if (c->alibi || c->sinks) {
        uint64_t rng = c->seed ^ 0x51ce5u;
        t->slopes = malloc((size_t)c->Hq * sizeof(float));
        t->sinks = malloc((size_t)c->Hq * sizeof(float));
        for (int64_t h = 0; h < c->Hq; h++) {
            t->slopes[h] = exp2f(-8.0f * (float)(h + 1) / (float)c->Hq);
            t->sinks[h] = h == 1 ? -INFINITY : 1.0f + 2.0f * th_rand_float(&rng);
        }
        t->desc.alibi_slopes = c->alibi ? t->slopes : NULL;
        t->desc.sinks = c->sinks ? t->sinks : NULL;
    }

    sdpa_tensor *views[4] = {&t->q, &t->k, &t->v, &t->o};
    const int64_t H[4] = {c->Hq, c->Hkv, c->Hkv, c->Hq};
    const int64_t T[4] = {Tq, Tkv, Tkv, Tq};
    const int64_t D[4] = {c->Dk, c->Dk, c->Dv, c->Dv};
    uint64_t rng = c->seed;
    const float amp = c->amplitude != 0.0f ? c->amplitude : 1.0f;
    for (int i = 0; i < 4; i++) {
        *views[i] = make_view(c->layout, c->dt[i], H[i], T[i], D[i]);
        t->elems[i] = (size_t)max_offset(views[i], t->VB, H[i], T[i], D[i]) + 1;
        const size_t es = dt_bytes(c->dt[i]);
        const size_t shift = c->guard == TH_GUARD_BEFORE ? (size_t)c->misalign : 0;
        char *buf = th_alloc((t->elems[i] + shift) * es, c->guard);
        t->bufs[i] = buf;
        views[i]->data = buf + shift * es;
        if (i < 3) {
            for (size_t e = 0; e < t->elems[i]; e++)
                put(views[i]->data, e, c->dt[i], amp * th_rand_float(&rng));
        } else if (es == 4) {
            for (size_t e = 0; e < t->elems[i]; e++)
                memcpy((char *)views[i]->data + 4 * e, &SENTINEL, sizeof SENTINEL);
        } else { /* a 16-bit NaN no rounding produces */
            for (size_t e = 0; e < t->elems[i]; e++)
                ((uint16_t *)views[i]->data)[e] = 0x7e5a;
        }
    }
    t->elems[4] = (size_t)(t->VB * c->Hq * Tq);
    t->lse = th_alloc(t->elems[4] * sizeof(float), c->guard);
    t->bufs[4] = t->lse;
    for (size_t e = 0; e < t->elems[4]; e++)
        memcpy(&t->lse[e], &SENTINEL, sizeof SENTINEL);
}

void th_tensors_free(th_tensors *t) {
    for (int i = 0; i < 5; i++)
        th_free(t->bufs[i]);
    th_free(t->mask);
    free(t->slopes);
    free(t->sinks);
    free(t->qlens);
    free(t->kvlens);
    free(t->cuq);
    free(t->cukv);
    memset(t, 0, sizeof *t);
}

static int close_enough(float x, float r, double rel_tol, double *abs_err, double *rel_err) {
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
    return e <= 1e-5 + rel_tol * fabs((double)r);
}

th_errors th_compare(const th_case *c, const th_tensors *a, const th_tensors *ref) {
    th_errors e = {0, 0, 0};
    const sdpa_dtype ot = a->o.dtype;
    const double rel_tol = 1e-4 + (ot == SDPA_F16 ? 0x1p-10 : ot == SDPA_BF16 ? 0x1p-7 : 0.0);
    const int64_t Tq = a->desc.len_q;
    for (int64_t b = 0; b < a->VB; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < Tq; i++)
                for (int64_t d = 0; d < c->Dv; d++)
                    if (!close_enough(th_get(&a->o, b, h, i, d), th_get(&ref->o, b, h, i, d),
                                      rel_tol, &e.max_abs, &e.max_rel))
                        e.bad++;
    for (size_t i = 0; i < a->elems[4]; i++)
        if (!close_enough(a->lse[i], ref->lse[i], 1e-4, &e.max_abs, &e.max_rel))
            e.bad++;
    /* the summary reports passing fp32 cases (16-bit outputs carry their own rounding) */
    if (e.bad == 0 && ot == SDPA_F32 && e.max_abs > th_worst_abs)
        th_worst_abs = e.max_abs;
    if (e.bad == 0 && ot == SDPA_F32 && e.max_rel > th_worst_rel)
        th_worst_rel = e.max_rel;
    return e;
}

/* Work below which th_run_case also checks the fused path against the independent
 * oracle (oracle.h): B Hq Tq Tkv (Dk + Dv) multiply-adds in double, a few milliseconds. */
#define ORACLE_WORK_MAX ((int64_t)1 << 22)

th_errors th_compare_oracle(const th_case *c, const th_tensors *a) {
    th_errors e = {0, 0, 0};
    const int64_t Tq = a->desc.len_q, Dv = c->Dv;
    const size_t rows = (size_t)(a->VB * c->Hq * Tq);
    double *o = malloc(rows * (size_t)Dv * sizeof(double)), *lse = malloc(rows * sizeof(double));
    if (!o || !lse || !th_oracle(&a->desc, &a->q, &a->k, &a->v, o, lse, NULL)) {
        free(o);
        free(lse);
        e.bad = -1;
        return e;
    }
    const sdpa_dtype ot = a->o.dtype;
    const double rel_tol = 1e-4 + (ot == SDPA_F16 ? 0x1p-10 : ot == SDPA_BF16 ? 0x1p-7 : 0.0);
    for (int64_t b = 0; b < a->VB; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < Tq; i++) {
                const size_t row = (size_t)((b * c->Hq + h) * Tq + i);
                for (int64_t d = 0; d < Dv; d++)
                    if (!close_enough(th_get(&a->o, b, h, i, d), (float)o[row * (size_t)Dv + (size_t)d],
                                      rel_tol, &e.max_abs, &e.max_rel))
                        e.bad++;
                if (!close_enough(a->lse[row], (float)lse[row], 1e-4, &e.max_abs, &e.max_rel))
                    e.bad++;
            }
    free(o);
    free(lse);
    return e;
}

/* Elements of an output buffer that belong to no element of the view must still hold
 * the sentinel: the call wrote nothing outside the output. */
static int64_t gaps_written(const th_case *c, const th_tensors *t) {
    if (c->layout != TH_PADDED)
        return 0;
    const size_t es = dt_bytes(t->o.dtype);
    char *mark = calloc(t->elems[3], 1);
    for (int64_t b = 0; b < t->VB; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < t->desc.len_q; i++)
                memset(mark + (b * t->o.stride_b + h * t->o.stride_h + i * t->o.stride_t), 1,
                       (size_t)c->Dv);
    int64_t bad = 0;
    for (size_t e = 0; e < t->elems[3]; e++) {
        const char *x = (const char *)t->o.data + e * es;
        const int intact = es == 4 ? memcmp(x, &SENTINEL, sizeof SENTINEL) == 0
                                   : *(const uint16_t *)(const void *)x == 0x7e5a;
        if (!mark[e] && !intact)
            bad++;
    }
    free(mark);
    return bad;
}

const char *th_case_str(const th_case *c, char *buf, size_t n) {
    static const char *layouts[] = {"bhtd", "bthd", "padded"};
    static const char *dts[] = {"f32", "f16", "bf16"};
    static const char *lens[] = {"none", "padded", "kv", "varlen"};
    int k = snprintf(buf, n,
                     "isa=%s B=%lld Hq=%lld Hkv=%lld Tq=%lld Tkv=%lld Dk=%lld Dv=%lld causal=%d "
                     "threads=%d layout=%s guard=%s misalign=%d scale=%g amp=%g seed=%llu",
                     sdpa_isa_name(th_isa), (long long)c->B, (long long)c->Hq, (long long)c->Hkv,
                     (long long)c->Tq, (long long)c->Tkv, (long long)c->Dk, (long long)c->Dv,
                     c->causal, c->threads, layouts[c->layout],
                     c->guard == TH_GUARD_BEFORE ? "before" : "after", c->misalign,
                     (double)c->scale, (double)c->amplitude, (unsigned long long)c->seed);
    if (k > 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k,
                 " dt=%s/%s/%s/%s window=%d(%lld,%lld) softcap=%g alibi=%d sinks=%d mask=%d/%s/"
                 "bcast%d/%.2f lens=%s dropout=%g",
                 dts[c->dt[0]], dts[c->dt[1]], dts[c->dt[2]], dts[c->dt[3]], c->window,
                 (long long)c->wl, (long long)c->wr, (double)c->softcap, c->alibi, c->sinks,
                 c->mask, dts[c->mask_dt], c->mask_bcast, (double)c->mask_hidden,
                 lens[c->lens], (double)c->dropout);
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
    char desc[512];
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
        const double work = (double)f.VB * (double)c->Hq * (double)f.desc.len_q *
                            (double)f.desc.len_kv * (double)(c->Dk + c->Dv);
        if (work <= (double)ORACLE_WORK_MAX) {
            const th_errors eo = th_compare_oracle(c, &f);
            ok &= th_check(eo.bad == 0, "th_run_case",
                           "%s [%s]: against the independent oracle max_abs=%.3g max_rel=%.3g "
                           "bad=%lld", label, th_case_str(c, desc, sizeof desc), eo.max_abs,
                           eo.max_rel, (long long)eo.bad);
        }
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
