/*
 * validate.c - input validation shared by sdpa_forward and sdpa_reference.
 *
 * Every check that can fail runs before either entry point allocates or writes
 * anything, so an error leaves the outputs untouched. The checks are exact integer
 * arithmetic with explicit overflow tests (64-bit element offsets everywhere); nothing
 * here reads tensor data (only the small caller arrays: sequence lengths, and the
 * per-head ALiBi slopes and sinks, which must be finite). This file does not decide how
 * to compute, only whether the request is well formed.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

#define CHECK(cond, status)      \
    do {                         \
        if (!(cond))             \
            return (status);     \
    } while (0)

static size_t dtype_size(sdpa_dtype t) {
    switch (t) {
    case SDPA_F32:
        return 4;
    case SDPA_F16:
    case SDPA_BF16:
        return 2;
    }
    return 0;
}

/* The extent of a view with dims n[0..2] (strides s[0..2]) and a contiguous last dim of
 * d elements: the byte range [lo, hi) it may touch. Fails on any overflow, including an
 * end address past the top of the address space. */
typedef struct span {
    uintptr_t lo, hi;
} span;

static sdpa_status view_span(const void *data, size_t esize, const int64_t n[3],
                             const int64_t s[3], int64_t d, span *out) {
    int64_t last = d - 1; /* offset of the last element, in elements */
    for (int i = 0; i < 3; i++) {
        int64_t t;
        CHECK(!__builtin_mul_overflow(n[i] - 1, s[i], &t), SDPA_ERR_OVERFLOW);
        CHECK(!__builtin_add_overflow(last, t, &last), SDPA_ERR_OVERFLOW);
    }
    int64_t bytes;
    CHECK(!__builtin_add_overflow(last, (int64_t)1, &bytes), SDPA_ERR_OVERFLOW);
    CHECK(!__builtin_mul_overflow(bytes, (int64_t)esize, &bytes), SDPA_ERR_OVERFLOW);
    CHECK((uint64_t)bytes <= (uint64_t)PTRDIFF_MAX && (uint64_t)bytes <= (uint64_t)SIZE_MAX,
          SDPA_ERR_OVERFLOW);
    uintptr_t lo = (uintptr_t)data, hi;
    CHECK(!__builtin_add_overflow(lo, (uintptr_t)bytes, &hi), SDPA_ERR_OVERFLOW);
    out->lo = lo;
    out->hi = hi;
    return SDPA_OK;
}

static int spans_overlap(span a, span b) { return a.lo < b.hi && b.lo < a.hi; }

/* An output view must map distinct elements to distinct addresses. Sufficient test:
 * order the dims of size > 1 by stride; each stride must reach past everything the
 * dims inside it cover. (It rejects a few exotic interleavings that do not alias;
 * libsdpa asks outputs to be laid out plainly.) */
static int output_self_overlaps(const int64_t n[3], const int64_t s[3], int64_t d) {
    int64_t dn[3], ds[3];
    int k = 0;
    for (int i = 0; i < 3; i++)
        if (n[i] > 1) {
            int j = k++;
            while (j > 0 && ds[j - 1] > s[i]) {
                dn[j] = dn[j - 1];
                ds[j] = ds[j - 1];
                j--;
            }
            dn[j] = n[i];
            ds[j] = s[i];
        }
    int64_t covered = d; /* elements spanned by the dims inside, as a max offset + 1 */
    for (int i = 0; i < k; i++) {
        if (ds[i] < covered)
            return 1;
        /* cannot overflow: view_span already bounded the whole extent */
        covered += (dn[i] - 1) * ds[i];
    }
    return 0;
}

static sdpa_status check_view(const sdpa_tensor *t, const int64_t n[3], int64_t d,
                              int is_output, span *sp) {
    CHECK(t != NULL && t->data != NULL, SDPA_ERR_NULL_POINTER);
    const size_t es = dtype_size(t->dtype);
    CHECK(es != 0, SDPA_ERR_BAD_DTYPE);
    CHECK((uintptr_t)t->data % es == 0, SDPA_ERR_MISALIGNED);
    const int64_t s[3] = {t->stride_b, t->stride_h, t->stride_t};
    for (int i = 0; i < 3; i++)
        CHECK(s[i] >= 0, SDPA_ERR_BAD_STRIDE);
    sdpa_status st = view_span(t->data, es, n, s, d, sp);
    if (st != SDPA_OK)
        return st;
    if (is_output)
        CHECK(!output_self_overlaps(n, s, d), SDPA_ERR_BAD_STRIDE);
    return SDPA_OK;
}

/* The span of a small caller array of count elements of size es (count >= 1). */
static sdpa_status array_span(const void *a, int64_t count, size_t es, span *sp) {
    const int64_t n[3] = {1, 1, 1}, s[3] = {0, 0, 0};
    return view_span(a, es, n, s, count, sp);
}

/* Sequence lengths: q_lens/kv_lens in range, or cu_seqlens starting at 0, non-decreasing
 * and ending within the views; *maxq / *maxkv get the longest sequence. */
static sdpa_status check_lengths(const sdpa_desc *d, int64_t *maxq, int64_t *maxkv) {
    const int64_t B = d->batch;
    const int64_t *arrs[4] = {d->q_lens, d->kv_lens, d->cu_seqlens_q, d->cu_seqlens_kv};
    for (int i = 0; i < 4; i++)
        CHECK((uintptr_t)arrs[i] % sizeof(int64_t) == 0, SDPA_ERR_MISALIGNED);
    *maxq = d->len_q;
    *maxkv = d->len_kv;
    if (d->cu_seqlens_q || d->cu_seqlens_kv) {
        CHECK(d->cu_seqlens_q && d->cu_seqlens_kv, SDPA_ERR_BAD_LENGTHS);
        CHECK(!d->q_lens && !d->kv_lens, SDPA_ERR_BAD_LENGTHS);
        const int64_t *cu[2] = {d->cu_seqlens_q, d->cu_seqlens_kv};
        const int64_t len[2] = {d->len_q, d->len_kv};
        int64_t *mx[2] = {maxq, maxkv};
        for (int t = 0; t < 2; t++) {
            CHECK(cu[t][0] == 0 && cu[t][B] <= len[t], SDPA_ERR_BAD_LENGTHS);
            *mx[t] = 0;
            for (int64_t b = 0; b < B; b++) {
                CHECK(cu[t][b + 1] >= cu[t][b], SDPA_ERR_BAD_LENGTHS);
                if (cu[t][b + 1] - cu[t][b] > *mx[t])
                    *mx[t] = cu[t][b + 1] - cu[t][b];
            }
        }
        return SDPA_OK;
    }
    for (int64_t b = 0; b < B; b++) {
        CHECK(!d->q_lens || (d->q_lens[b] >= 0 && d->q_lens[b] <= d->len_q), SDPA_ERR_BAD_LENGTHS);
        CHECK(!d->kv_lens || (d->kv_lens[b] >= 0 && d->kv_lens[b] <= d->len_kv),
              SDPA_ERR_BAD_LENGTHS);
    }
    return SDPA_OK;
}

/* Both entry points: attention (v, o, optional output lse; weights NULL) or attention
 * weights (weights non-NULL: v and o unused, lse a required input). */
static sdpa_status validate(const sdpa_desc *desc, const sdpa_tensor *q, const sdpa_tensor *k,
                            const sdpa_tensor *v, const sdpa_tensor *o, const float *lse,
                            const float *weights, sdpa_problem *p) {
    const int wmode = weights != NULL;
    CHECK(desc != NULL && q != NULL && k != NULL, SDPA_ERR_NULL_POINTER);
    CHECK(wmode ? lse != NULL : (v != NULL && o != NULL), SDPA_ERR_NULL_POINTER);
    CHECK(q->data != NULL && k->data != NULL, SDPA_ERR_NULL_POINTER);
    CHECK(wmode || (v->data != NULL && o->data != NULL), SDPA_ERR_NULL_POINTER);

    const int64_t dims[5] = {desc->batch, desc->heads_q, desc->heads_kv, desc->len_q,
                             desc->len_kv};
    for (int i = 0; i < 5; i++)
        CHECK(dims[i] >= 1 && dims[i] <= SDPA_MAX_DIM, SDPA_ERR_BAD_DIMENSION);
    CHECK(desc->dim_qk >= 1 && desc->dim_qk <= SDPA_MAX_HEAD_DIM, SDPA_ERR_BAD_DIMENSION);
    CHECK(desc->dim_v >= 1 && desc->dim_v <= SDPA_MAX_HEAD_DIM, SDPA_ERR_BAD_DIMENSION);
    CHECK(desc->heads_q % desc->heads_kv == 0, SDPA_ERR_BAD_HEADS);

    CHECK(isfinite(desc->scale), SDPA_ERR_BAD_ARGUMENT);
    CHECK(isfinite(desc->softcap) && desc->softcap >= 0.0f, SDPA_ERR_BAD_ARGUMENT);
    CHECK(desc->num_threads >= 0, SDPA_ERR_BAD_ARGUMENT);
    CHECK(desc->causal == SDPA_CAUSAL_NONE || desc->causal == SDPA_CAUSAL_BOTTOM_RIGHT ||
              desc->causal == SDPA_CAUSAL_TOP_LEFT,
          SDPA_ERR_BAD_ARGUMENT);
    CHECK(desc->isa >= SDPA_ISA_AUTO && desc->isa < SDPA_ISA_COUNT_, SDPA_ERR_BAD_ARGUMENT);
    if (desc->window)
        CHECK(desc->window_left >= 0 && desc->window_left <= SDPA_MAX_DIM &&
                  desc->window_right >= 0 && desc->window_right <= SDPA_MAX_DIM,
              SDPA_ERR_BAD_ARGUMENT);

    if (desc->dropout_p != 0.0f) {
        /* !(p < 1) also rejects NaN; the counter words hold b, h, i, j / 4 (philox.h) */
        CHECK(desc->dropout_p > 0.0f && desc->dropout_p < 1.0f, SDPA_ERR_BAD_ARGUMENT);
        const int64_t lim = (int64_t)1 << 32;
        CHECK(desc->batch < lim && desc->heads_q < lim && desc->len_q < lim &&
                  desc->len_kv < 4 * lim,
              SDPA_ERR_BAD_ARGUMENT);
    }

    const sdpa_mask *mk = &desc->mask;
    CHECK(mk->kind == SDPA_MASK_NONE || mk->kind == SDPA_MASK_ADDITIVE ||
              mk->kind == SDPA_MASK_BOOL,
          SDPA_ERR_BAD_ARGUMENT);
    CHECK((mk->kind == SDPA_MASK_NONE) == (mk->data == NULL), SDPA_ERR_BAD_ARGUMENT);

    int64_t maxq, maxkv;
    sdpa_status st = check_lengths(desc, &maxq, &maxkv);
    if (st != SDPA_OK)
        return st;

    const int varlen = desc->cu_seqlens_q != NULL;
    const int64_t B = desc->batch, Hq = desc->heads_q, Hkv = desc->heads_kv;
    const int64_t Tq = desc->len_q, Tkv = desc->len_kv;
    /* under packed varlen the views are one batch entry of the total rows */
    const int64_t VB = varlen ? 1 : B;
    const int64_t nq[3] = {VB, Hq, Tq}, nkv[3] = {VB, Hkv, Tkv};
    span sq, sk, sv, so, sl = {0, 0};
    if ((st = check_view(q, nq, desc->dim_qk, 0, &sq)) != SDPA_OK)
        return st;
    if ((st = check_view(k, nkv, desc->dim_qk, 0, &sk)) != SDPA_OK)
        return st;
    if (wmode) {
        /* the weights: [VB, Hq, Tq, Tkv] contiguous floats */
        int64_t n = VB;
        CHECK(!__builtin_mul_overflow(n, Hq, &n) && !__builtin_mul_overflow(n, Tq, &n) &&
                  !__builtin_mul_overflow(n, Tkv, &n),
              SDPA_ERR_OVERFLOW);
        CHECK((uintptr_t)weights % sizeof(float) == 0, SDPA_ERR_MISALIGNED);
        if ((st = array_span(weights, n, sizeof(float), &so)) != SDPA_OK)
            return st;
    } else {
        if ((st = check_view(v, nkv, desc->dim_v, 0, &sv)) != SDPA_OK)
            return st;
        if ((st = check_view(o, nq, desc->dim_v, 1, &so)) != SDPA_OK)
            return st;
    }

    /* every other caller array the call reads, to check that no output overlaps it */
    span in[9];
    int nin = 0;
    in[nin++] = sq;
    in[nin++] = sk;
    if (!wmode)
        in[nin++] = sv;
    if (mk->kind != SDPA_MASK_NONE) {
        const sdpa_dtype mt = mk->kind == SDPA_MASK_BOOL ? SDPA_F32 : mk->dtype;
        CHECK(mk->kind != SDPA_MASK_BOOL || mk->dtype == SDPA_F32, SDPA_ERR_BAD_DTYPE);
        const size_t es = mk->kind == SDPA_MASK_BOOL ? 1 : dtype_size(mt);
        CHECK(es != 0, SDPA_ERR_BAD_DTYPE);
        CHECK((uintptr_t)mk->data % es == 0, SDPA_ERR_MISALIGNED);
        CHECK(mk->stride_b >= 0 && mk->stride_h >= 0 && mk->stride_q >= 0, SDPA_ERR_BAD_STRIDE);
        if (maxq > 0 && maxkv > 0) {
            const int64_t n[3] = {B, Hq, maxq}, s[3] = {mk->stride_b, mk->stride_h, mk->stride_q};
            if ((st = view_span(mk->data, es, n, s, maxkv, &in[nin++])) != SDPA_OK)
                return st;
        }
    }
    const float *harr[2] = {desc->alibi_slopes, desc->sinks};
    for (int i = 0; i < 2; i++)
        if (harr[i]) {
            CHECK((uintptr_t)harr[i] % sizeof(float) == 0, SDPA_ERR_MISALIGNED);
            if ((st = array_span(harr[i], Hq, sizeof(float), &in[nin++])) != SDPA_OK)
                return st;
        }
    /* The per-head parameters are arguments like scale, not data: a NaN or infinite slope
     * turns the scores it touches into NaN (inf * 0 on the diagonal) and a NaN or +inf
     * sink every row of its head, so they are refused like a non-finite scale. A sink of
     * -inf is allowed: it is the sink switched off for that head. */
    for (int64_t h = 0; h < Hq; h++) {
        CHECK(!desc->alibi_slopes || isfinite(desc->alibi_slopes[h]), SDPA_ERR_BAD_ARGUMENT);
        CHECK(!desc->sinks || isfinite(desc->sinks[h]) || desc->sinks[h] == -INFINITY,
              SDPA_ERR_BAD_ARGUMENT);
    }
    const int64_t *larr[2] = {varlen ? desc->cu_seqlens_q : desc->q_lens,
                              varlen ? desc->cu_seqlens_kv : desc->kv_lens};
    for (int i = 0; i < 2; i++)
        if (larr[i]) {
            if ((st = array_span(larr[i], B + varlen, sizeof(int64_t), &in[nin++])) != SDPA_OK)
                return st;
        }
    if (lse && wmode) { /* an input here */
        CHECK((uintptr_t)lse % sizeof(float) == 0, SDPA_ERR_MISALIGNED);
        const int64_t nl[3] = {VB, Hq, Tq}, sl3[3] = {Hq * Tq, Tq, 1};
        if ((st = view_span(lse, sizeof(float), nl, sl3, 1, &in[nin++])) != SDPA_OK)
            return st;
    }
    for (int i = 0; i < nin; i++)
        CHECK(!spans_overlap(so, in[i]), SDPA_ERR_OVERLAP);
    if (lse && !wmode) {
        CHECK((uintptr_t)lse % sizeof(float) == 0, SDPA_ERR_MISALIGNED);
        const int64_t nl[3] = {VB, Hq, Tq};
        const int64_t sl3[3] = {Hq * Tq, Tq, 1}; /* products bounded by the o view's */
        if ((st = view_span(lse, sizeof(float), nl, sl3, 1, &sl)) != SDPA_OK)
            return st;
        for (int i = 0; i < nin; i++)
            CHECK(!spans_overlap(sl, in[i]), SDPA_ERR_OVERLAP);
        CHECK(!spans_overlap(sl, so), SDPA_ERR_OVERLAP);
    }

    p->B = B;
    p->Hq = Hq;
    p->Hkv = Hkv;
    p->Tq = Tq;
    p->Tkv = Tkv;
    p->Dk = desc->dim_qk;
    p->Dv = desc->dim_v;
    p->group = Hq / Hkv;
    p->scale = desc->scale != 0.0f ? desc->scale : (float)(1.0 / sqrt((double)desc->dim_qk));
    p->causal = desc->causal;
    p->num_threads = desc->num_threads;
    p->isa = desc->isa;
    p->q = q->data;
    p->k = k->data;
    p->v = wmode ? NULL : v->data;
    p->o = wmode ? NULL : o->data;
    p->lse = (float *)(uintptr_t)lse;
    p->qt = q->dtype;
    p->kt = k->dtype;
    p->vt = wmode ? SDPA_F32 : v->dtype;
    p->ot = wmode ? SDPA_F32 : o->dtype;
    memset(p->vs, 0, sizeof p->vs);
    memset(p->os, 0, sizeof p->os);
    const sdpa_tensor *views[4] = {q, k, v, o};
    int64_t *strides[4] = {p->qs, p->ks, p->vs, p->os};
    for (int i = 0; i < (wmode ? 2 : 4); i++) {
        strides[i][0] = varlen ? 0 : views[i]->stride_b;
        strides[i][1] = views[i]->stride_h;
        strides[i][2] = views[i]->stride_t;
    }
    p->lse_sb = varlen ? 0 : Hq * Tq;
    p->lse_sh = Tq;
    p->mask = *mk;
    p->window = desc->window != 0;
    p->window_left = p->window ? desc->window_left : 0;
    p->window_right = p->window ? desc->window_right : 0;
    p->softcap = desc->softcap;
    p->alibi = desc->alibi_slopes;
    p->sinks = desc->sinks;
    p->q_lens = varlen ? NULL : desc->q_lens;
    p->kv_lens = varlen ? NULL : desc->kv_lens;
    p->cu_q = varlen ? desc->cu_seqlens_q : NULL;
    p->cu_kv = varlen ? desc->cu_seqlens_kv : NULL;
    p->dropout_p = desc->dropout_p;
    p->dropout_threshold = 0;
    p->dropout_scale = 1.0f;
    p->dropout_seed = desc->dropout_seed;
    if (desc->dropout_p != 0.0f) {
        /* p in (0, 1): p 2^32 rounds into [1, 2^32 - 1] except within 2^-33 of 1 */
        const double t = nearbyint((double)desc->dropout_p * 4294967296.0);
        p->dropout_threshold = t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
        p->dropout_scale = (float)(1.0 / (1.0 - (double)desc->dropout_p));
    }
    return SDPA_OK;
}

sdpa_status sdpa_validate(const sdpa_desc *desc, const sdpa_tensor *q, const sdpa_tensor *k,
                          const sdpa_tensor *v, const sdpa_tensor *o, const float *lse,
                          sdpa_problem *p) {
    return validate(desc, q, k, v, o, lse, NULL, p);
}

sdpa_status sdpa_validate_weights(const sdpa_desc *desc, const sdpa_tensor *q,
                                  const sdpa_tensor *k, const float *lse, const float *weights,
                                  sdpa_problem *p) {
    CHECK(weights != NULL, SDPA_ERR_NULL_POINTER);
    return validate(desc, q, k, NULL, NULL, lse, weights, p);
}
