/*
 * validate.c - input validation shared by sdpa_forward and sdpa_reference.
 *
 * Every check that can fail runs before either entry point allocates or writes
 * anything, so an error leaves the outputs untouched. The checks are exact integer
 * arithmetic with explicit overflow tests (64-bit element offsets everywhere); nothing
 * here reads tensor data. This file does not decide how to compute, only whether the
 * request is well formed.
 */
#include <math.h>
#include <stdint.h>

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
                              int is_output, size_t *esize, span *sp) {
    CHECK(t != NULL && t->data != NULL, SDPA_ERR_NULL_POINTER);
    size_t es = dtype_size(t->dtype);
    CHECK(es != 0, SDPA_ERR_BAD_DTYPE);
    /* This version computes fp32 operands only (sdpa.h, sdpa_dtype). */
    CHECK(t->dtype == SDPA_F32, SDPA_ERR_BAD_DTYPE);
    CHECK((uintptr_t)t->data % es == 0, SDPA_ERR_MISALIGNED);
    const int64_t s[3] = {t->stride_b, t->stride_h, t->stride_t};
    for (int i = 0; i < 3; i++)
        CHECK(s[i] >= 0, SDPA_ERR_BAD_STRIDE);
    sdpa_status st = view_span(t->data, es, n, s, d, sp);
    if (st != SDPA_OK)
        return st;
    if (is_output)
        CHECK(!output_self_overlaps(n, s, d), SDPA_ERR_BAD_STRIDE);
    *esize = es;
    return SDPA_OK;
}

sdpa_status sdpa_validate(const sdpa_desc *desc, const sdpa_tensor *q, const sdpa_tensor *k,
                          const sdpa_tensor *v, const sdpa_tensor *o, const float *lse,
                          sdpa_problem *p) {
    CHECK(desc != NULL && q != NULL && k != NULL && v != NULL && o != NULL,
          SDPA_ERR_NULL_POINTER);
    CHECK(q->data != NULL && k->data != NULL && v->data != NULL && o->data != NULL,
          SDPA_ERR_NULL_POINTER);

    const int64_t dims[5] = {desc->batch, desc->heads_q, desc->heads_kv, desc->len_q,
                             desc->len_kv};
    for (int i = 0; i < 5; i++)
        CHECK(dims[i] >= 1 && dims[i] <= SDPA_MAX_DIM, SDPA_ERR_BAD_DIMENSION);
    CHECK(desc->dim_qk >= 1 && desc->dim_qk <= SDPA_MAX_HEAD_DIM, SDPA_ERR_BAD_DIMENSION);
    CHECK(desc->dim_v >= 1 && desc->dim_v <= SDPA_MAX_HEAD_DIM, SDPA_ERR_BAD_DIMENSION);
    CHECK(desc->heads_q % desc->heads_kv == 0, SDPA_ERR_BAD_HEADS);

    CHECK(isfinite(desc->scale), SDPA_ERR_BAD_ARGUMENT);
    CHECK(desc->num_threads >= 0, SDPA_ERR_BAD_ARGUMENT);
    CHECK(desc->causal == SDPA_CAUSAL_NONE || desc->causal == SDPA_CAUSAL_BOTTOM_RIGHT,
          SDPA_ERR_BAD_ARGUMENT);
    CHECK(desc->isa >= SDPA_ISA_AUTO && desc->isa < SDPA_ISA_COUNT_, SDPA_ERR_BAD_ARGUMENT);

    const int64_t B = desc->batch, Hq = desc->heads_q, Hkv = desc->heads_kv;
    const int64_t Tq = desc->len_q, Tkv = desc->len_kv;
    const int64_t nq[3] = {B, Hq, Tq}, nkv[3] = {B, Hkv, Tkv};
    size_t es;
    span sq, sk, sv, so, sl;
    sdpa_status st;
    if ((st = check_view(q, nq, desc->dim_qk, 0, &es, &sq)) != SDPA_OK)
        return st;
    if ((st = check_view(k, nkv, desc->dim_qk, 0, &es, &sk)) != SDPA_OK)
        return st;
    if ((st = check_view(v, nkv, desc->dim_v, 0, &es, &sv)) != SDPA_OK)
        return st;
    if ((st = check_view(o, nq, desc->dim_v, 1, &es, &so)) != SDPA_OK)
        return st;

    CHECK(!spans_overlap(so, sq) && !spans_overlap(so, sk) && !spans_overlap(so, sv),
          SDPA_ERR_OVERLAP);
    if (lse) {
        CHECK((uintptr_t)lse % sizeof(float) == 0, SDPA_ERR_MISALIGNED);
        const int64_t nl[3] = {B, Hq, Tq};
        const int64_t sl3[3] = {Hq * Tq, Tq, 1}; /* products bounded by the o view's */
        if ((st = view_span(lse, sizeof(float), nl, sl3, 1, &sl)) != SDPA_OK)
            return st;
        CHECK(!spans_overlap(sl, sq) && !spans_overlap(sl, sk) && !spans_overlap(sl, sv) &&
                  !spans_overlap(sl, so),
              SDPA_ERR_OVERLAP);
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
    p->q = (const float *)q->data;
    p->k = (const float *)k->data;
    p->v = (const float *)v->data;
    p->o = (float *)o->data;
    p->lse = (float *)lse;
    const sdpa_tensor *views[4] = {q, k, v, o};
    int64_t *strides[4] = {p->qs, p->ks, p->vs, p->os};
    for (int i = 0; i < 4; i++) {
        strides[i][0] = views[i]->stride_b;
        strides[i][1] = views[i]->stride_h;
        strides[i][2] = views[i]->stride_t;
    }
    return SDPA_OK;
}
